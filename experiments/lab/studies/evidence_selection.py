"""Study behind round-robin evidence: selection rules for the generator's passages, replayed on SHARP traces.

    python -m experiments.lab.studies.evidence_selection RESULTS.jsonl [--dataset hotpotqa] [--split dev] [--caps 5,6,8]

SHARP pools the passages of every query it asked (the question, the planner's sub-queries, the
critic's retry queries) and shows the generator ``evidence_cap`` of them. The rule that picks them
decides how much of the gold evidence the generator sees, and needs no LM to score: this reads the
retriever steps of a finished run (queries and ranked ids per round) and reports recall and
all-gold of each rule at each cap, against the gold titles.

Rules: ``round-robin`` (EvidencePool.select: rank 1 of every query, then rank 2, ...),
``rrf`` (reciprocal rank fusion over the queries: a passage several queries found rises), and
``question-first`` (the question's own top passages first, up to half the cap, then round-robin).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from program.reading.evidence import EvidencePool
from program.types import Passage


def pooled(trace: list[dict]) -> EvidencePool:
    """The run's evidence pool rebuilt from its retriever steps (ids only: selection needs no text)."""
    pool = EvidencePool()
    for step in trace:
        if step.get("role") != "retriever":
            continue
        for query, ids in zip(step.get("queries") or [], step.get("retrieved_ids") or []):
            pool.add(query, [Passage(i, "", "") for i in ids])
    return pool


def round_robin(pool: EvidencePool, cap: int) -> list[str]:
    return [p.id for p in pool.select(cap)]


def rrf(pool: EvidencePool, cap: int, k: int = 5) -> list[str]:
    scores: dict[str, float] = {}
    for passages in pool.by_query.values():
        for rank, p in enumerate(passages):
            scores[p.id] = scores.get(p.id, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda i: -scores[i])[:cap]


def question_first(pool: EvidencePool, cap: int) -> list[str]:
    if not pool.by_query:
        return []
    head = [p.id for p in next(iter(pool.by_query.values()))[: max(1, cap // 2)]]
    return (head + [i for i in round_robin(pool, cap + len(head)) if i not in head])[:cap]


RULES = {"round-robin": round_robin, "rrf": rrf, "question-first": question_first}


def score(rows: list[dict], golds: dict[str, set[str]], titles: dict[str, str], caps: list[int]) -> dict:
    out: dict[str, dict] = {}
    for name, rule in RULES.items():
        for cap in caps:
            recall = all_gold = n = 0
            for row in rows:
                gold = golds.get(row["id"])
                if not gold or not row.get("trace"):
                    continue
                seen = {titles.get(i, "").strip().lower() for i in rule(pooled(row["trace"]), cap)}
                hits = len(gold & seen)
                recall += hits / len(gold)
                all_gold += hits == len(gold)
                n += 1
            out[f"{name}@{cap}"] = {
                "n": n,
                "recall": recall / n if n else None,
                "all_gold": all_gold / n if n else None,
            }
    return out


def main(argv: list[str] | None = None) -> None:
    from experiments.runtime import Runtime, load_dataset_corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--caps", default="5,6,8")
    args = ap.parse_args(argv)
    rt = Runtime(dataset=args.dataset)
    titles = {p.id: p.title for p in load_dataset_corpus(rt.dataset, rt.data_dir)}
    golds = {ex.id: {t.strip().lower() for t in ex.gold_titles} for ex in rt.examples(args.split)}
    rows = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "trace" in r]
    result = score(rows, golds, titles, [int(c) for c in args.caps.split(",")])
    sys.stdout.write(
        f"{len(rows)} questions from {args.results.name}\n\n| rule@cap | recall | all-gold |\n|---|---|---|\n"
    )
    for key, m in result.items():
        sys.stdout.write(f"| {key} | {m['recall']:.3f} | {m['all_gold']:.3f} |\n")


if __name__ == "__main__":
    main()
