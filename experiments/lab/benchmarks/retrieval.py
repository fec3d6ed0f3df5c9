"""Retrieval benchmark: embedding backends, index build, fusion tuning (train), dev quality, latency.

    python -m experiments.lab.benchmarks.retrieval --dataset hotpotqa [--tune] [--backends torch,onnx,onnx-int8]

Writes WORKSPACE/benchmarks/retrieval_<dataset>.json and .md. Steps:
  1. throughput of each embedding backend x max_seq_length on a seeded 1,000-passage sample;
  2. full-corpus embeddings per backend (cached under WORKSPACE/benchmarks/cache) and their dense
     recall on dev by exact search, so a faster backend is shown not to lose recall;
  3. (--tune) grid over BM25 title repeats / k1 / b and RRF weights / rrf_k / depth, scored on the
     *train* split only (exact dense search with the default backend's vectors);
  4. the built index (WORKSPACE/indexes/<dataset>, built by `sharp index` if missing): build time
     from its manifest, then dev recall@5/@10, all-gold@10 per mode through open_retriever, and
     single-query latency p50/p95 per mode (query embedding included).
Run it under the shared lock: flock /tmp/sharp-heavy.lock python -m experiments.lab.benchmarks.retrieval
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lab.reporting import log_progress, made_by, write_report

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

log = logging.getLogger("benchmarks.retrieval")

DEPTH = 100


# ---- embeddings ----------------------------------------------------------------------------
def embed_sorted(embedder: Any, texts: Sequence[str], chunk: int = 1024) -> tuple[np.ndarray, float]:
    """Embed like build_index does (longest first, in chunks); vectors in input order, seconds."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = np.zeros((len(texts), embedder.dimension), dtype=np.float32)
    start = time.perf_counter()
    for s in range(0, len(order), chunk):
        idx = order[s : s + chunk]
        out[idx] = embedder.encode([texts[i] for i in idx])
    return out, time.perf_counter() - start


def throughput(texts: list[str], backends: list[str], seq_lengths: list[int], batch_sizes: list[int]) -> list[dict]:
    """Passages/s per backend x max_seq_length: torch per batch size, the ONNX backends (one text per
    run) per number of threads."""
    from program.retrieval.embedder import Embedder, embed_threads

    rows = []
    for backend, msl in itertools.product(backends, seq_lengths):
        if backend == "torch":
            grid = [(bs, None) for bs in batch_sizes]
        else:
            grid = [(None, t) for t in sorted({1, embed_threads()})]
        for bs, threads in grid:
            emb = Embedder(backend=backend, max_seq_length=msl, batch_size=bs or 64, threads=threads)
            emb.encode(texts[:8])  # load + warm up
            _, secs = embed_sorted(emb, texts)
            rows.append(
                {
                    "backend": backend,
                    "max_seq_length": msl,
                    "batch_size": bs,
                    "threads": threads,
                    "passages_per_second": round(len(texts) / secs, 1),
                }
            )
            log.info("throughput %s", rows[-1])
    return rows


def full_embeddings(
    corpus: list, backend: str, msl: int, dense_text: str, cache: Path, corpus_hash: str
) -> tuple[np.ndarray, dict]:
    from program.retrieval import RetrieverConfig
    from program.retrieval.dense import dense_document
    from program.retrieval.embedder import Embedder

    defaults = RetrieverConfig()
    batching = f"-b{defaults.embed_batch_size}" if backend == "torch" else "-per-text"
    path = cache / f"{backend}-{msl}{batching}-{dense_text}-{corpus_hash[:12]}.npy"
    meta_path = path.with_suffix(".json")
    if path.exists() and meta_path.exists():
        return np.load(path), json.loads(meta_path.read_text())
    emb = Embedder(backend=backend, max_seq_length=msl, batch_size=defaults.embed_batch_size)
    emb.encode(["warm up"])
    vecs, secs = embed_sorted(emb, [dense_document(p, dense_text) for p in corpus])
    meta = {"seconds": round(secs, 1), "passages_per_second": round(len(corpus) / secs, 1)}
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    meta_path.write_text(json.dumps(meta))
    return vecs, meta


def exact_dense(doc_vecs: np.ndarray, query_vecs: np.ndarray, depth: int = DEPTH) -> list[list[int]]:
    scores = query_vecs @ doc_vecs.T
    if depth < scores.shape[1]:
        top = np.argpartition(-scores, depth, axis=1)[:, :depth]
    else:
        top = np.tile(np.arange(scores.shape[1]), (scores.shape[0], 1))
    return [list(row[np.argsort(-scores[i, row], kind="stable")]) for i, row in enumerate(top)]


# ---- lexical variants and fusion, on passage indices -----------------------------------------
class LexicalVariants:
    """BM25 rankings for several (title_repeat, k1, b), tokenizing the corpus once."""

    def __init__(self, corpus: list) -> None:
        from program.retrieval.bm25 import LexicalTokenizer

        self.tok = LexicalTokenizer()
        self.title_tokens = [self.tok(p.title) for p in corpus]
        self.text_tokens = [self.tok(p.text) for p in corpus]

    def rankings(
        self, queries: list[str], title_repeat: int, k1: float, b: float, depth: int = DEPTH
    ) -> list[list[int]]:
        import bm25s

        from program.retrieval.bm25 import top_k

        docs = [t * title_repeat + x for t, x in zip(self.title_tokens, self.text_tokens)]
        model = bm25s.BM25(k1=k1, b=b, method="lucene")
        model.index(docs, show_progress=False)
        vocab = model.vocab_dict
        out = []
        for q in queries:
            ids = [vocab[t] for t in dict.fromkeys(self.tok(q)) if t in vocab]
            out.append(top_k(model.get_scores_from_ids(ids), depth) if ids else [])
        return out


def fuse_indices(
    dense: list[int], bm25: list[int], wd: float, wb: float, rrf_k: float, depth: int, k: int
) -> list[int]:
    score: dict[int, float] = {}
    best: dict[int, int] = {}
    for ranking, w in ((dense[:depth], wd), (bm25[:depth], wb)):
        for r, i in enumerate(ranking, start=1):
            score[i] = score.get(i, 0.0) + w / (rrf_k + r)
            best[i] = min(best.get(i, r), r)
    return sorted(score, key=lambda i: (-score[i], best[i], i))[:k]


def score_rankings(rankings: list[list[int]], corpus: list, questions: list, ks=(5, 10)) -> dict:
    from optimize.retrieval_metrics import aggregate

    return aggregate(
        [
            (q.get("type"), [corpus[i].title for i in r], q.get("gold_titles") or [])
            for r, q in zip(rankings, questions)
        ],
        ks,
    )


def tune(corpus: list, train: list, dense_rank: list[list[int]], lex: LexicalVariants) -> tuple[dict, list[dict]]:
    """Grid on train; objective recall@10 + all_gold@10. Returns (best params, all rows)."""
    rows = []
    queries = [q.question for q in train]
    for tr, k1, b in itertools.product((0, 1, 2, 3, 4), (0.9, 1.2, 1.5), (0.75, 0.9, 1.0)):
        bm = lex.rankings(queries, tr, k1, b)
        bm_only = score_rankings(bm, corpus, train)["overall"]
        rows.append(
            {
                "title_repeat": tr,
                "k1": k1,
                "b": b,
                "fusion": "bm25-only",
                "recall@10": bm_only["recall@10"],
                "all_gold@10": bm_only["all_gold@10"],
            }
        )
        for wd, rrf_k, depth in itertools.product((0.4, 0.5, 0.6, 0.7, 0.8, 1.0), (2, 5, 10, 20, 60), (DEPTH,)):
            fused = [fuse_indices(d, m, wd, 1.0, rrf_k, depth, 10) for d, m in zip(dense_rank, bm)]
            o = score_rankings(fused, corpus, train, ks=(10,))["overall"]
            rows.append(
                {
                    "title_repeat": tr,
                    "k1": k1,
                    "b": b,
                    "dense_weight": wd,
                    "rrf_k": rrf_k,
                    "depth": depth,
                    "recall@10": o["recall@10"],
                    "all_gold@10": o["all_gold@10"],
                }
            )
        log.info("tuned title_repeat=%s k1=%s b=%s", tr, k1, b)
    fused_rows = [r for r in rows if "rrf_k" in r]
    best = max(fused_rows, key=lambda r: (round(r["recall@10"] + r["all_gold@10"], 6), -r["title_repeat"], r["rrf_k"]))
    return best, rows


# ---- the built index -------------------------------------------------------------------------
def latency(retriever: Any, queries: list[str], k: int = 10) -> dict:
    retriever.retrieve(queries[0], k)  # warm up (model load, first query)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        retriever.retrieve(q, k)
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "p50_ms": round(float(np.percentile(times, 50)), 2),
        "p95_ms": round(float(np.percentile(times, 95)), 2),
        "n": len(times),
    }


def evaluate_modes(index_dir: Path, dev: list, corpus_hash: str, n_latency: int, extra: dict[str, dict]) -> dict:
    from experiments.jobs.evaluation import evaluate_retriever
    from program.retrieval import RetrieverConfig, open_retriever

    out = {}
    configs = {m: RetrieverConfig(mode=m) for m in ("dense", "bm25", "hybrid")}
    configs.update({name: RetrieverConfig.from_mapping(v) for name, v in extra.items()})
    for name, cfg in configs.items():
        r = open_retriever(index_dir, cfg, corpus_sha256=corpus_hash)
        metrics, _ = evaluate_retriever(r, dev, 10)
        out[name] = {
            "overall": metrics["overall"],
            "by_type": metrics["by_type"],
            "latency": latency(r, [q.question for q in dev[:n_latency]]),
        }
        log.info("%s: %s", name, {k: round(v, 3) for k, v in metrics["overall"].items()})
    return out


# ---- report ----------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    ds = report["dataset"]
    lines = [
        f"# Retrieval benchmark: {ds}",
        "",
        f"{report['machine']}; corpus {report['corpus_size']} passages; "
        f"dev {report['dev_size']} questions"
        + (f", train {report['train_size']}" if report.get("train_size") else "")
        + f". Generated {report['generated_at']} by `{report['command']}`.",
        "",
    ]
    if report.get("build"):
        lines += _build_table(report["build"])
    if report.get("throughput"):
        lines += _throughput_table(report["throughput"])
    if report.get("backends"):
        lines += _backends_table(report["backends"])
    if report.get("tuning"):
        t = report["tuning"]
        lines += ["## Fusion tuning (train split only)", "", f"Best on train: `{json.dumps(t['best'])}`", ""]
    lines += _modes_tables(report["modes"])
    lines += ["", "Config defaults: `" + json.dumps(report["config"]) + "`", ""]
    return "\n".join(lines)


def _build_table(b: dict) -> list[str]:
    return [
        "## Index build (the default config; from the index manifest's last build run)",
        "",
        "| backend | passages | embedded in that run | build s | embed s | p/s | bm25 s |",
        "|---|---|---|---|---|---|---|",
        f"| {b['backend']} | {b['num_passages']} | {b.get('embedded_this_run')} | {b.get('build_seconds')} | "
        f"{b.get('embed_seconds')} | {b.get('passages_per_second')} | {b.get('bm25_seconds')} |",
        "",
    ]


def _throughput_table(rows: list[dict]) -> list[str]:
    lines = [
        "## Embedding throughput (seeded 1,000-passage sample, length-sorted)",
        "",
        "| backend | max_seq_length | batch (torch) | threads (ONNX, one text per run) | p/s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['backend']} | {r['max_seq_length']} | {r['batch_size'] or '-'} | {r.get('threads') or '-'} | "
        f"{r['passages_per_second']} |"
        for r in rows
    ]
    return [*lines, ""]


def _backends_table(rows: list[dict]) -> list[str]:
    lines = [
        "## Backends: full-corpus embedding and dense recall on dev (exact search)",
        "",
        "Dense alone, and fused with BM25 by the default hybrid settings.",
        "",
        "| backend | max_seq_length | embed s | p/s | dense recall@5 | dense recall@10 | dense all-gold@10 "
        "| hybrid recall@10 | hybrid all-gold@10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['backend']} | {r['max_seq_length']} | {r['seconds']} | {r['passages_per_second']} | "
        f"{r['recall@5']:.3f} | {r['recall@10']:.3f} | {r['all_gold@10']:.3f} | "
        f"{r['hybrid_recall@10']:.3f} | {r['hybrid_all_gold@10']:.3f} |"
        for r in rows
    ]
    return [*lines, ""]


def _modes_tables(modes: dict[str, dict]) -> list[str]:
    """Dev quality and latency per mode, then recall@10 / all-gold@10 per question type."""
    lines = [
        "## Dev quality and latency per mode (open_retriever on the built index, k=10)",
        "",
        "| mode | recall@5 | recall@10 | all-gold@10 | precision@10 | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, m in modes.items():
        o, lat = m["overall"], m["latency"]
        lines.append(
            f"| {mode} | {o['recall@5']:.3f} | {o['recall@10']:.3f} | {o['all_gold@10']:.3f} | "
            f"{o['precision@10']:.3f} | {lat['p50_ms']} | {lat['p95_ms']} |"
        )
    types = sorted(next(iter(modes.values()))["by_type"])
    lines += ["", "### Per question type (recall@10 / all-gold@10)", "", "| mode | " + " | ".join(types) + " |"]
    lines.append("|---" * (len(types) + 1) + "|")
    for mode, m in modes.items():
        cells = [
            f"{m['by_type'][t]['recall@10']:.3f} / {m['by_type'][t]['all_gold@10']:.3f} (n={m['by_type'][t]['n']})"
            for t in types
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="hotpotqa")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workspace", default=None)
    p.add_argument(
        "--backends", default="torch,onnx,onnx-int8", help="Backends for the throughput and recall tables ('' skips)."
    )
    p.add_argument("--seq-lengths", default="256,128")
    p.add_argument("--batch-sizes", default="16,32,64,128")
    p.add_argument("--sample", type=int, default=1000)
    p.add_argument(
        "--full-backends",
        default="torch:256,onnx-int8:256,onnx-int8:128",
        help="backend:max_seq_length pairs embedded in full for the recall table ('' skips).",
    )
    p.add_argument("--tune", action="store_true", help="Grid-search BM25/fusion settings on the train split.")
    p.add_argument("--latency-queries", type=int, default=200)
    p.add_argument("--no-index", action="store_true", help="Stop before the built-index step (tables 1-3 only).")
    return p.parse_args(argv)


def passage_sample(corpus: list, n: int, dense_text: str) -> list[str]:
    """The dense texts of a seeded sample of ``n`` passages (all of a smaller corpus)."""
    from program.retrieval.dense import dense_document

    rng = np.random.default_rng(0)
    return [dense_document(corpus[i], dense_text) for i in rng.choice(len(corpus), min(n, len(corpus)), replace=False)]


def backend_recall(
    corpus: list, dev: list, train: list, specs: list[str], lex: LexicalVariants | None, cache: Path, corpus_hash: str
) -> tuple[list[dict], dict[str, dict[str, list[list[int]]]]]:
    """Step 2: per ``backend:max_seq_length``, the full corpus embedded (cached), its dense and default-hybrid
    recall on dev by exact search; also the dense rankings of dev and train questions by spec."""
    from program.retrieval import RetrieverConfig
    from program.retrieval.embedder import Embedder

    defaults = RetrieverConfig()
    bm25_dev = (
        lex.rankings([q.question for q in dev], defaults.bm25_title_repeat, defaults.bm25_k1, defaults.bm25_b)
        if lex
        else []
    )
    rows, ranks_by = [], {}
    for spec in specs:
        backend, msl = spec.split(":")
        vecs, meta = full_embeddings(corpus, backend, int(msl), defaults.dense_text, cache, corpus_hash)
        qemb = Embedder(backend=backend, max_seq_length=int(msl))
        ranks = {
            name: exact_dense(vecs, qemb.encode([q.question for q in qs]))
            for name, qs in (("dev", dev), ("train", train))
            if qs
        }
        ranks_by[spec] = ranks
        o = score_rankings(ranks["dev"], corpus, dev)["overall"]
        fused = [
            fuse_indices(
                d, m, defaults.dense_weight, defaults.bm25_weight, defaults.rrf_k, defaults.candidate_depth, 10
            )
            for d, m in zip(ranks["dev"], bm25_dev)
        ]
        h = score_rankings(fused, corpus, dev)["overall"]
        rows.append(
            {
                "backend": backend,
                "max_seq_length": int(msl),
                **meta,
                **{k: o[k] for k in ("recall@5", "recall@10", "all_gold@10")},
                "hybrid_recall@10": h["recall@10"],
                "hybrid_all_gold@10": h["all_gold@10"],
            }
        )
        log.info("backend %s", rows[-1])
    return rows, ranks_by


def tuning(
    corpus: list, train: list, dense_ranks: dict[str, dict[str, list[list[int]]]], lex: LexicalVariants, rows_file: Path
) -> dict:
    """Step 3: :func:`tune` on the train questions with the default backend's dense rankings; every grid row
    goes to ``rows_file``, the best and the top 15 to the report."""
    from program.retrieval import RetrieverConfig

    defaults = RetrieverConfig()
    spec = f"{defaults.backend}:{defaults.max_seq_length}"
    if spec not in dense_ranks:
        raise SystemExit(f"--tune needs --full-backends to include the default {spec}")
    best, rows = tune(corpus, train, dense_ranks[spec]["train"], lex)
    rows_file.write_text(json.dumps(rows))
    return {
        "best": best,
        "grid_size": len(rows),
        "top": sorted(rows, key=lambda r: -(r["recall@10"] + r["all_gold@10"]))[:15],
    }


def built_index(
    corpus: list, dev: list, dataset: str, index_dir: Path, corpus_hash: str, n_latency: int
) -> tuple[dict, dict]:
    """Step 4: the index (built with the defaults if missing or incomplete): its build figures from the
    manifest, and dev quality and latency per mode, the naive RRF included."""
    from data.indexing import build_index
    from program.retrieval import RetrieverConfig
    from program.retrieval.manifest import read_manifest

    manifest = read_manifest(index_dir)
    if manifest is None or manifest.get("status") != "complete":
        manifest = build_index(corpus, index_dir, RetrieverConfig(), progress=False, dataset=dataset)
    build = {
        "backend": manifest["backend"],
        "num_passages": manifest["num_passages"],
        **(manifest.get("timings") or {}),
    }
    naive = {"mode": "hybrid", "dense_weight": 1.0, "bm25_weight": 1.0, "rrf_k": 60}
    modes = evaluate_modes(index_dir, dev, corpus_hash, n_latency, {"hybrid (naive RRF: w=1,1 k=60)": naive})
    return build, modes


def main(argv: Sequence[str] | None = None) -> dict:
    log_progress()
    args = parse_args(argv)
    from experiments import settings
    from experiments.runtime import index_name, load_dataset_corpus, load_questions
    from program.retrieval import RetrieverConfig
    from program.retrieval.manifest import corpus_sha256

    ws = settings.workspace(args.workspace)
    out_dir, cache = ws / "benchmarks", ws / "benchmarks" / "cache"
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = load_dataset_corpus(args.dataset, args.data_dir)
    corpus_hash = corpus_sha256(corpus)
    dev = load_questions(args.dataset, "dev", args.data_dir)
    train = load_questions(args.dataset, "train", args.data_dir) if args.tune else []
    defaults = RetrieverConfig()
    report: dict[str, Any] = {
        "dataset": args.dataset,
        "corpus_size": len(corpus),
        "dev_size": len(dev),
        "train_size": len(train) or None,
        **made_by("experiments.lab.benchmarks.retrieval", argv, ws),
        "config": defaults.model_dump(exclude={"onnx_cache_dir"}),
    }
    backends = [b for b in args.backends.split(",") if b]
    if backends:
        report["throughput"] = throughput(
            passage_sample(corpus, args.sample, defaults.dense_text),
            backends,
            [int(s) for s in args.seq_lengths.split(",")],
            [int(b) for b in args.batch_sizes.split(",")],
        )
    lex = LexicalVariants(corpus) if (args.tune or args.full_backends) else None
    specs = [s for s in args.full_backends.split(",") if s]
    report["backends"], dense_ranks = backend_recall(corpus, dev, train, specs, lex, cache, corpus_hash)
    name = index_name(args.dataset)
    if args.tune:
        report["tuning"] = tuning(corpus, train, dense_ranks, lex, out_dir / f"retrieval_tuning_{name}.json")
    if args.no_index:
        (out_dir / f"retrieval_{name}_partial.json").write_text(json.dumps(report, indent=2))
        return report
    index_dir = settings.index_dir(name, ws)
    report["build"], report["modes"] = built_index(
        corpus, dev, args.dataset, index_dir, corpus_hash, args.latency_queries
    )
    print(write_report(report, out_dir, f"retrieval_{name}", markdown))
    return report


if __name__ == "__main__":
    main()
