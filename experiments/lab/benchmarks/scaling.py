"""Index-build costs measured on a real corpus, per passage, to extrapolate to a larger one (experiments/SCALING.md).

    python -m experiments.lab.benchmarks.scaling --dataset hotpotqa --workspace WS [--target 5000000]

Builds the default index of the dataset's corpus from scratch in WS/indexes/scaling-<dataset> (never
the shared workspace) with the code `sharp index` runs (data.indexing.build_index), sampling this
process's resident memory (VmRSS, every 0.2 s) through the build, then measures:
  * build: wall time, embedding time (the embedder alone), Chroma add time, BM25 time, peak RSS in the
    embed+Chroma phase and in the BM25 phase;
  * disk: bytes of chroma/ and bm25/ (and their largest files), per passage;
  * embedding throughput of the default backend on a seeded 2,000-passage sample, per thread count;
  * a fresh query process (subprocess): time to open the hybrid retriever, its RSS, the BM25 matrix
    (non-zeros, vocabulary), and p50/p95 latency of 200 dev questions per mode;
  * a linear extrapolation of every per-passage figure to --target passages.
Writes WS/benchmarks/scaling_<dataset>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lab.reporting import log_progress, made_by, write_report

log = logging.getLogger("benchmarks.scaling")

GiB = 1024**3
MiB = 1024**2


def rss_bytes() -> int:
    """Resident memory of this process now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RssSampler:
    """(time, rss) every ``period`` seconds in a daemon thread; ``peak(t0, t1)`` over a window."""

    def __init__(self, period: float = 0.2) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def _run(self, period: float) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), rss_bytes()))
            self._stop.wait(period)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, t0: float, t1: float) -> int:
        return max((r for t, r in self.samples if t0 <= t <= t1), default=0)


class TimedEmbedder:
    """Wraps an Embedder and adds up the seconds spent embedding (build_index also stores to Chroma)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dimension, self.backend = inner.dimension, getattr(inner, "backend", "custom")
        self.method = getattr(inner, "method", None)  # None: a custom embedder (program.retrieval.embedder.method_of)
        self.max_seq_length = getattr(inner, "max_seq_length", None)
        self.seconds, self.first, self.last = 0.0, None, None

    def encode(self, texts, batch_size=None, progress=None):
        t0 = time.perf_counter()
        self.first = self.first or t0
        out = self.inner.encode(texts, batch_size, progress)
        self.last = time.perf_counter()
        self.seconds += self.last - t0
        return out


def folder_bytes(path: Path) -> tuple[int, list[tuple[str, int]]]:
    files = [(str(f.relative_to(path)), f.stat().st_size) for f in path.rglob("*") if f.is_file()]
    return sum(s for _, s in files), sorted(files, key=lambda x: -x[1])[:4]


def sqlite_tables(db: Path, top: int = 6) -> list[tuple[str, int]]:
    """The largest tables and indexes of Chroma's SQLite file (bytes), read-only."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT name, SUM(pgsize) AS s FROM dbstat GROUP BY name ORDER BY s DESC").fetchall()
    except sqlite3.Error as exc:  # dbstat is a compile-time option of SQLite
        log.warning("no table sizes for %s: %s", db, exc)
        return []
    return [(name, int(size)) for name, size in rows[:top]]


def throughput(texts: list[str], thread_counts: Sequence[int]) -> list[dict]:
    from experiments.lab.benchmarks.retrieval import embed_sorted
    from program.retrieval.embedder import Embedder

    rows = []
    for threads in thread_counts:
        emb = Embedder(backend="onnx-int8", threads=threads)
        emb.encode(texts[:8])
        _, secs = embed_sorted(emb, texts)
        rows.append({"threads": threads, "passages_per_second": round(len(texts) / secs, 1)})
        log.info("throughput %s", rows[-1])
    return rows


# ---- the query process (run in a subprocess: a clean RSS) -----------------------------------------
def probe(index_dir: str, dataset: str, data_dir: str | None, n: int) -> dict:
    from experiments.runtime import load_questions
    from program.retrieval import RetrieverConfig, open_retriever

    questions = [q.question for q in load_questions(dataset, "dev", Path(data_dir) if data_dir else None)][:n]
    out: dict[str, Any] = {"rss_python_mib": round(rss_bytes() / MiB, 1)}
    t0 = time.perf_counter()
    dense = open_retriever(index_dir, RetrieverConfig(mode="dense"))
    dense.retrieve(questions[0], 10)  # loads the model and the HNSW index
    out["dense_open_and_first_query_s"] = round(time.perf_counter() - t0, 2)
    out["rss_after_dense_mib"] = round(rss_bytes() / MiB, 1)
    t0 = time.perf_counter()
    bm25 = open_retriever(index_dir, RetrieverConfig(mode="bm25"))
    bm25.retrieve(questions[0], 10)  # the BM25 matrix and the passage store
    out["bm25_open_and_first_query_s"] = round(time.perf_counter() - t0, 2)
    out["rss_after_bm25_mib"] = round(rss_bytes() / MiB, 1)
    scores = bm25._model.scores
    out["bm25_nnz"] = int(scores["data"].size)
    out["bm25_matrix_bytes"] = int(scores["data"].nbytes + scores["indices"].nbytes + scores["indptr"].nbytes)
    out["bm25_vocab"] = len(bm25._vocab)
    for mode in ("dense", "bm25", "hybrid"):
        r = open_retriever(index_dir, RetrieverConfig(mode=mode))
        r.retrieve(questions[0], 10)
        times = []
        for q in questions:
            t = time.perf_counter()
            r.retrieve(q, 10)
            times.append((time.perf_counter() - t) * 1000)
        out[f"{mode}_ms"] = {
            "p50": round(float(np.percentile(times, 50)), 2),
            "p95": round(float(np.percentile(times, 95)), 2),
        }
    out["rss_end_mib"] = round(rss_bytes() / MiB, 1)
    return out


# ---- report ---------------------------------------------------------------------------------------
def extrapolate(report: dict, target: int) -> dict:
    n = report["corpus_size"]
    b, d = report["build"], report["disk"]
    scale = target / n
    return {
        "target_passages": target,
        "embed_hours_at_measured_rate": round(target / b["embed_passages_per_second"] / 3600, 1),
        "chroma_add_hours_at_measured_rate": round(target / b["chroma_add_per_second"] / 3600, 1),
        "bm25_build_minutes": round(b["bm25_seconds"] * scale / 60, 1),
        "chroma_gib": round(d["chroma_bytes"] * scale / GiB, 1),
        "bm25_gib": round(d["bm25_bytes"] * scale / GiB, 1),
        "bm25_matrix_gib": round(report["query"].get("bm25_matrix_bytes", 0) * scale / GiB, 2),
        "corpus_in_memory_gib": round(b["corpus_python_mib"] * MiB * scale / GiB, 1),
        "hnsw_file_gib": round(report["disk"]["hnsw_bytes"] * scale / GiB, 1),
        "query_process_bm25_part_gib": round(
            (report["query"]["rss_after_bm25_mib"] - report["query"]["rss_after_dense_mib"]) * MiB * scale / GiB, 1
        ),
        "bm25_build_rss_growth_gib": round((b["peak_rss_bm25_mib"] - b["rss_before_bm25_mib"]) * MiB * scale / GiB, 1),
        "chroma_add_calls": -(-target // 5461),
    }


def markdown(r: dict) -> str:
    b, d, q, x = r["build"], r["disk"], r["query"], r["extrapolated"]
    n = r["corpus_size"]
    lines = [
        f"# Index-build costs on {r['dataset']} ({n} passages)",
        "",
        f"{r['machine']}. Generated {r['generated_at']} by `{r['command']}`.",
        "",
        "| measure | value | per passage |",
        "|---|---|---|",
        f"| build wall time | {b['build_seconds']} s | {1000 * b['build_seconds'] / n:.2f} ms |",
        f"| embedding (default backend, {r['threads']} threads) | {b['embed_seconds']} s "
        f"({b['embed_passages_per_second']} p/s) | {1000 * b['embed_seconds'] / n:.2f} ms |",
        f"| Chroma add (HNSW insert + SQLite) | {b['chroma_add_seconds']} s ({b['chroma_add_per_second']} /s) "
        f"| {1000 * b['chroma_add_seconds'] / n:.2f} ms |",
        f"| BM25 build (tokenize + index + save) | {b['bm25_seconds']} s | {1000 * b['bm25_seconds'] / n:.2f} ms |",
        f"| Python memory of the loaded corpus (list of Passage, tracemalloc) | {b['corpus_python_mib']} MiB | "
        f"{b['corpus_python_mib'] * 1024 / n:.2f} KiB |",
        f"| RSS before the build (corpus and model loaded) | {b['rss_before_mib']} MiB | |",
        f"| peak RSS, embed + Chroma phase | {b['peak_rss_embed_mib']} MiB | |",
        f"| peak RSS, BM25 phase | {b['peak_rss_bm25_mib']} MiB (from {b['rss_before_bm25_mib']}) | "
        f"{(b['peak_rss_bm25_mib'] - b['rss_before_bm25_mib']) * MiB / n / 1024:.2f} KiB |",
        f"| disk chroma/ | {d['chroma_bytes'] / MiB:.1f} MiB | {d['chroma_bytes'] / n / 1024:.2f} KiB |",
        f"| of which HNSW vectors + links (data_level0.bin; held in RAM when queried) | "
        f"{d['hnsw_bytes'] / MiB:.1f} MiB | {d['hnsw_bytes'] / n / 1024:.2f} KiB |",
        f"| disk bm25/ | {d['bm25_bytes'] / MiB:.1f} MiB | {d['bm25_bytes'] / n / 1024:.2f} KiB |",
        f"| query process: open dense + first query / then BM25 | {q['dense_open_and_first_query_s']} s / "
        f"{q['bm25_open_and_first_query_s']} s | |",
        f"| query process RSS: python + libraries / + dense (model, HNSW) / + BM25 (matrix, passages) | "
        f"{q['rss_python_mib']} / {q['rss_after_dense_mib']} / {q['rss_after_bm25_mib']} MiB | "
        f"BM25 part {(q['rss_after_bm25_mib'] - q['rss_after_dense_mib']) * 1024 / n:.2f} KiB |",
        f"| BM25 matrix: non-zeros / vocabulary / bytes | {q.get('bm25_nnz')} / {q.get('bm25_vocab')} / "
        f"{q.get('bm25_matrix_bytes', 0) / MiB:.1f} MiB | {q.get('bm25_nnz', 0) / n:.1f} nnz |",
    ]
    for mode in ("dense", "bm25", "hybrid"):
        lines.append(f"| {mode} query latency p50 / p95 | {q[f'{mode}_ms']['p50']} / {q[f'{mode}_ms']['p95']} ms | |")
    lines += ["", "Embedding throughput, default backend (one text per run), seeded 2,000-passage sample:", ""]
    lines += [f"- {t['threads']} thread(s): {t['passages_per_second']} p/s" for t in r["throughput"]]
    lines += ["", "Largest files:", ""]
    lines += [f"- {k}: {name} {size / MiB:.1f} MiB" for k in ("chroma", "bm25") for name, size in d[f"{k}_largest"]]
    lines += ["", "Inside chroma.sqlite3 (largest tables and indexes, per passage):", ""]
    lines += [f"- {name}: {size / MiB:.1f} MiB ({size / n / 1024:.2f} KiB)" for name, size in d["chroma_sqlite_tables"]]
    lines += ["", f"## Linear extrapolation to {x['target_passages']:,} passages", ""]
    lines += [f"- {k}: {v}" for k, v in x.items() if k != "target_passages"]
    lines.append("")
    return "\n".join(lines)


def measure_build(corpus: list, index_dir: Path, cfg: Any, dataset: str, corpus_bytes: int) -> dict:
    """Build the index from scratch with a timed embedder, sampling RSS: wall, embed, Chroma and BM25 times and
    the memory of each phase."""
    from data.indexing import build_index
    from program.retrieval.embedder import Embedder

    if index_dir.exists():  # this benchmark's own folder: start empty, so the disk figures are of one build
        shutil.rmtree(index_dir)
    emb = TimedEmbedder(Embedder.from_config(cfg))
    emb.inner.encode(["load the model"])
    rss_before = rss_bytes()
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        manifest = build_index(corpus, index_dir, cfg, progress=False, embedder=emb, dataset=dataset)
        t1 = time.perf_counter()
    timings = manifest["timings"]
    bm25_start = t1 - timings["bm25_seconds"]
    chroma_seconds = timings["embed_seconds"] - emb.seconds
    return {
        "build_seconds": round(t1 - t0, 1),
        "embed_seconds": round(emb.seconds, 1),
        "embed_passages_per_second": round(len(corpus) / emb.seconds, 1),
        "chroma_add_seconds": round(chroma_seconds, 1),
        "chroma_add_per_second": round(len(corpus) / max(chroma_seconds, 1e-9), 1),
        "bm25_seconds": timings["bm25_seconds"],
        "corpus_python_mib": round(corpus_bytes / MiB, 1),
        "rss_before_mib": round(rss_before / MiB, 1),
        "peak_rss_embed_mib": round(sampler.peak(t0, bm25_start) / MiB, 1),
        "rss_before_bm25_mib": round(next((r for t, r in sampler.samples if t >= bm25_start), rss_before) / MiB, 1),
        "peak_rss_bm25_mib": round(sampler.peak(bm25_start, t1) / MiB, 1),
    }


def disk(index_dir: Path) -> dict:
    """Bytes of chroma/ and bm25/ and their largest files, of the HNSW file, and of SQLite's largest tables."""
    from program.retrieval.manifest import BM25_DIR, CHROMA_DIR

    out: dict[str, Any] = {}
    for key, sub in (("chroma", CHROMA_DIR), ("bm25", BM25_DIR)):
        total, largest = folder_bytes(index_dir / sub)
        out[f"{key}_bytes"] = total
        out[f"{key}_largest"] = largest
    out["hnsw_bytes"] = sum(f.stat().st_size for f in (index_dir / CHROMA_DIR).rglob("data_level0.bin"))
    out["chroma_sqlite_tables"] = sqlite_tables(index_dir / CHROMA_DIR / "chroma.sqlite3")
    return out


def query_process(args: argparse.Namespace, ws: Path, index_dir: Path) -> dict:
    """:func:`probe` run in a fresh process (this script with ``--probe``), so its RSS is of the query side only."""
    cmd = [sys.executable, "-m", "experiments.lab.benchmarks.scaling"]
    cmd += ["--dataset", args.dataset, "--workspace", str(ws)]
    cmd += ["--probe", str(index_dir), "--latency-queries", str(args.latency_queries)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip())


def main(argv: Sequence[str] | None = None) -> dict:
    log_progress()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="hotpotqa")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workspace", required=True, help="Where the index is built (not the shared workspace).")
    p.add_argument("--target", type=int, default=5_000_000)
    p.add_argument("--latency-queries", type=int, default=200)
    p.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # internal: the query process
    args = p.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.probe, args.dataset, args.data_dir, args.latency_queries)))
        return {}

    from experiments import settings
    from experiments.lab.benchmarks.retrieval import passage_sample
    from experiments.runtime import index_name, load_dataset_corpus
    from program.retrieval import RetrieverConfig
    from program.retrieval.embedder import embed_threads

    ws = settings.workspace(args.workspace)
    name = index_name(args.dataset)
    index_dir = ws / "indexes" / f"scaling-{name}"
    cfg = RetrieverConfig()
    import tracemalloc

    tracemalloc.start()  # Python memory the loaded corpus holds (RSS deltas miss reused arenas)
    corpus = load_dataset_corpus(args.dataset, args.data_dir)
    corpus_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    report: dict[str, Any] = {
        "dataset": args.dataset,
        "corpus_size": len(corpus),
        "threads": embed_threads(),
        **made_by("experiments.lab.benchmarks.scaling", argv, ws, "no GPU, shared with other jobs"),
    }
    report["build"] = measure_build(corpus, index_dir, cfg, name, corpus_bytes)
    log.info("build %s", report["build"])
    report["disk"] = disk(index_dir)
    report["throughput"] = throughput(passage_sample(corpus, 2000, cfg.dense_text), sorted({1, embed_threads()}))
    report["query"] = query_process(args, ws, index_dir)
    report["extrapolated"] = extrapolate(report, args.target)
    print(write_report(report, ws / "benchmarks", f"scaling_{name}", markdown))
    return report


if __name__ == "__main__":
    main()
