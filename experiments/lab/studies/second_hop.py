"""Study behind the second-hop settings: how often every gold paragraph is in the top k with the no-LM hop.

    python -m experiments.lab.studies.second_hop [--dataset hotpotqa] [--n-train 300] [--n-dev 100]

Settings are chosen on a seeded sample of the *train* split (a grid over the share of k kept from the
question's own hits, the number of seed passages and the characters of each seed in its hop query,
scored by all-gold@5); the dev figures are then reported for the default retriever and the chosen and
default hop settings, at k = 3, 5, 7 (SHARP's schedule; plain RAG uses 5) and per question type,
scored as `sharp eval-retrieval` scores. The grid
runs each distinct search once; the reported dev rows go through open_retriever, the code the systems
run. Writes WORKSPACE/benchmarks/second_hop_<dataset>.json and .md. Needs the index, no LM.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from typing import Any

from experiments.lab.reporting import log_progress, write_report
from optimize.metrics import evidence_complete
from program.retrieval import RetrieverConfig
from program.retrieval.hop import combine, fuse_hops, hop_query

KS = (3, 5, 7)
GRID = {"hop_keep": (0.4, 0.6, 0.8), "hop_seeds": (1, 2), "hop_seed_chars": (150, 300, 600)}


def all_gold(examples: Sequence[Any], ranked: Sequence[Sequence[Any]]) -> float:
    return sum(evidence_complete(e.gold_titles, [p.title for p in ps]) for e, ps in zip(examples, ranked)) / len(
        examples
    )


def one_by_one(retriever: Any, queries: Sequence[str], depth: int) -> list:
    """Each query alone, as the systems ask. (Since the ONNX embedders run one text at a time a query's
    vector no longer depends on the other queries of a batch; with the batched int8 embedder before it
    did: experiments/findings/retrieval.md, 'Batch-independent embeddings'.)"""
    return [retriever.retrieve(q, depth) for q in queries]


def grid(base: Any, examples: Sequence[Any], depth: int, rrf_k: float, k: int = 5) -> list[dict]:
    """all-gold@k of every grid point on ``examples``, each distinct search made once."""
    questions = [e.question for e in examples]
    first = one_by_one(base, questions, depth)
    hops: dict[tuple[int, int], list] = {}  # (seed rank, chars) -> hits per question
    for rank, chars in itertools.product(range(max(GRID["hop_seeds"])), GRID["hop_seed_chars"]):
        queries = [hop_query(q, hits[rank], chars) if len(hits) > rank else q for q, hits in zip(questions, first)]
        hops[(rank, chars)] = one_by_one(base, queries, depth)
    rows = []
    for keep, seeds, chars in itertools.product(*GRID.values()):
        ranked = [
            combine(first[i], fuse_hops([hops[(r, chars)][i] for r in range(seeds)], rrf_k, depth), k, keep)
            for i in range(len(examples))
        ]
        rows.append(
            {"hop_keep": keep, "hop_seeds": seeds, "hop_seed_chars": chars, f"all_gold@{k}": all_gold(examples, ranked)}
        )
    rows.append(
        {
            "hop_keep": None,
            "hop_seeds": None,
            "hop_seed_chars": None,
            f"all_gold@{k}": all_gold(examples, [hits[:k] for hits in first]),
        }
    )
    return rows


def markdown(report: dict) -> str:
    lines = [
        f"# Second hop on {report['dataset']}",
        "",
        f"Grid on {report['n_train']} train questions (seed {report['train_seed']}), all-gold@5, best first:",
        "",
        "| hop_keep | hop_seeds | hop_seed_chars | all-gold@5 |",
        "|---|---|---|---|",
    ]
    for r in report["grid"][:8]:
        lines.append(f"| {r['hop_keep']} | {r['hop_seeds']} | {r['hop_seed_chars']} | {r['all_gold@5']:.3f} |")
    lines += [
        "",
        f"Without the hop: {report['train_base_all_gold@5']:.3f}.",
        "",
        f"Dev, {report['n_dev']} seeded questions (seed {report['dev_seed']}):",
        "",
        "| retriever | " + " | ".join(f"all-gold@{k}" for k in KS) + " | ms/query |",
        "|---|" + "---|" * (len(KS) + 1),
    ]
    for name, s in report["dev"].items():
        lines.append(
            f"| {name} | "
            + " | ".join(f"{s['overall'][f'all_gold@{k}']:.2f}" for k in KS)
            + f" | {s['latency']['batched_ms_per_query']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def scores(retriever: Any, examples: Sequence[Any]) -> dict:
    """all-gold, recall and precision at each of KS, overall and per question type (eval-retrieval's
    scoring: a hop retriever is asked once per cutoff), one question per call as the systems ask (see
    :func:`one_by_one`), and the latency per query at the largest cutoff."""
    from experiments.jobs.evaluation import evaluate_retriever

    metrics, latency = evaluate_retriever(retriever, list(examples), max(KS), batch=1, ks=KS)
    return {**metrics, "latency": latency}


def main(argv: list[str] | None = None) -> None:
    from experiments.runtime import Runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--n-train", type=int, default=300)
    ap.add_argument("--train-seed", type=int, default=1)
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--dev-seed", type=int, default=0)
    args = ap.parse_args(argv)
    log_progress()
    rt = Runtime(dataset=args.dataset)
    defaults = RetrieverConfig()
    train = rt.examples("train", args.n_train, args.train_seed)
    rows = grid(rt.retriever(), train, defaults.hop_depth, defaults.rrf_k)
    base_row = rows.pop()
    rows.sort(key=lambda r: -r["all_gold@5"])
    best = {key: rows[0][key] for key in GRID}
    dev = rt.examples("dev", args.n_dev, args.dev_seed)
    chosen = {
        "default retriever": {},
        "second hop, defaults": {"second_hop": True},
        "second hop, train-best": {"second_hop": True, **best},
    }
    report = {
        "dataset": args.dataset,
        "n_train": len(train),
        "train_seed": args.train_seed,
        "grid": rows,
        "train_base_all_gold@5": base_row["all_gold@5"],
        "train_best": best,
        "defaults": {key: getattr(defaults, key) for key in GRID},
        "n_dev": len(dev),
        "dev_seed": args.dev_seed,
        "dev": {name: scores(rt.retriever(o), dev) for name, o in chosen.items()},
    }
    sys.stdout.write(write_report(report, rt.workspace / "benchmarks", f"second_hop_{args.dataset}", markdown))


if __name__ == "__main__":
    main()
