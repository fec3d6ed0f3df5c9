"""Study behind the onnx-int8 per-text embedder: padded batches (before) vs one text per run (after).

    python -m experiments.lab.studies.embedding --dataset hotpotqa [--methods before,after,static,onnx]

Methods (same MiniLM weights, max_seq_length 128, 'title. text' passages):
  before  the embedder up to commit 49bcb0e: the int8 graph fed padded batches of up to 64 texts /
          4,096 tokens, longest first, one session with an intra-op pool of SHARP_EMBED_THREADS threads;
          dynamic quantization takes one activation scale over the whole batch tensor
  after   Embedder(backend="onnx-int8") now: the same int8 graph, each text alone ([1, length], no
          padding), texts spread over SHARP_EMBED_THREADS single-threaded workers
  static  static QDQ int8 (onnxruntime quantize_static: int8 per-channel weights, uint8 activations with
          MinMax scales calibrated once on 128 seeded corpus passages, every weight MatMul of the unfused
          graph; the two activation x activation MatMuls of attention stay fp32), one text per run
  onnx    Embedder(backend="onnx"): fp32, one text per run
Per method: passages/s embedding the whole corpus (longest first, chunks of 1,024, as build_index does),
query-embedding latency (one question at a time), dense and hybrid (default weighted RRF over the default
BM25) recall@5/@10 and all-gold@5/@10 on dev by exact search with each question embedded alone, and the
batch-invariance check: every dev question embedded inside random batches of 1, 7, 64 and all dev
questions (a seeded permutation cut in batches) against alone: max |difference| of the vectors and the
number of questions whose top-10 dense / hybrid hits change, plus 200 seeded passages embedded alone
against their vectors from the corpus run. Writes WORKSPACE/benchmarks/embedding_<dataset>.json and .md.
Run it under the shared lock: flock /tmp/sharp-heavy.lock python -m experiments.lab.studies.embedding
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lab.benchmarks.retrieval import (
    LexicalVariants,
    embed_sorted,
    exact_dense,
    fuse_indices,
    score_rankings,
)
from experiments.lab.reporting import log_progress, made_by, write_report

log = logging.getLogger("studies.embedding")

BATCHES = (1, 7, 64)
KS = (5, 10)


# ---- the embedder before this change, reproduced -------------------------------------------------
def legacy_batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, max_tokens: int) -> list[np.ndarray]:
    """The old batching: consecutive slices of ``order`` (longest first) of at most ``batch_size`` texts
    and ``max_tokens`` padded tokens."""
    out, start = [], 0
    while start < len(order):
        width = max(int(lengths[order[start]]), 1)
        size = max(1, min(batch_size, max_tokens // width))
        out.append(order[start : start + size])
        start += size
    return out


class BatchedInt8:
    """The int8 embedder before: padded batches, one session, an intra-op pool (see the module doc)."""

    backend = "onnx-int8 (batched, before)"

    def __init__(self, threads: int, batch_size: int = 64, max_tokens: int = 4096, max_seq_length: int = 128):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from program.retrieval.config import DEFAULT_EMBEDDING_MODEL
        from program.retrieval.embedder import local_model_folder, model_max_length
        from program.retrieval.onnx_export import ensure_onnx_model

        folder = local_model_folder(DEFAULT_EMBEDDING_MODEL)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        path = ensure_onnx_model(folder, int8=True)
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.dimension = int(self.session.get_outputs()[0].shape[-1])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=min(max_seq_length, model_max_length(folder)))
        self.tokenizer.no_padding()
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from program.retrieval.embedder import normalize_rows, pool_tokens

        encs = self.tokenizer.encode_batch(list(texts))
        lengths = np.array([len(e.ids) for e in encs])
        order = np.argsort(-lengths, kind="stable")
        out = np.zeros((len(encs), self.dimension), dtype=np.float32)
        for idx in legacy_batches(order, lengths, self.batch_size, self.max_tokens):
            width = int(lengths[idx].max())
            ids, mask = np.zeros((len(idx), width), np.int64), np.zeros((len(idx), width), np.int64)
            for row, i in enumerate(idx):
                n = len(encs[i].ids)
                ids[row, :n], mask[row, :n] = encs[i].ids, encs[i].attention_mask
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            out[idx] = pool_tokens(self.session.run(None, feeds)[0], mask, "mean")
        return normalize_rows(out)


# ---- static int8, for comparison ------------------------------------------------------------------
def static_int8(calibration: list[str], cache: Path, threads: int) -> Any:
    """An Embedder running a static QDQ int8 graph (scales calibrated once on ``calibration``), one text
    per run like backend onnx-int8."""
    import onnxruntime as ort

    from program.retrieval.config import DEFAULT_EMBEDDING_MODEL
    from program.retrieval.embedder import Embedder, local_model_folder
    from program.retrieval.onnx_export import model_cache_dir

    emb = Embedder(backend="onnx", threads=threads)
    emb.encode(["load"])  # exports model.onnx once (cached)
    impl = emb._impl
    raw = model_cache_dir(local_model_folder(DEFAULT_EMBEDDING_MODEL)) / "model.onnx"
    out = cache / "static-qdq-u8s8-minmax-weight-matmuls.onnx"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        quantize_weight_matmuls(raw, out, impl.tokenizer.encode_batch(calibration))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    impl.session = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"])
    impl.input_names = {i.name for i in impl.session.get_inputs()}
    emb.backend = "static int8 QDQ"
    return emb


def quantize_weight_matmuls(raw: Path, out: Path, encs: list) -> None:
    """Write ``out``: the fp32 graph ``raw`` with every weight MatMul static QDQ int8 (u8 activations with
    MinMax scales from the tokenized calibration texts ``encs``, s8 per-channel weights); attention's two
    activation x activation MatMuls stay fp32."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(encs)

        def get_next(self):
            e = next(self.it, None)
            if e is None:
                return None
            return {
                "input_ids": np.asarray([e.ids], np.int64),
                "attention_mask": np.asarray([e.attention_mask], np.int64),
                "token_type_ids": np.asarray([e.type_ids], np.int64),
            }

    quantize_static(
        str(raw),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QUInt8,  # u8 x s8: the fast integer kernels on x86
        calibrate_method=CalibrationMethod.MinMax,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=[
            n.name
            for n in onnx.load(str(raw), load_external_data=False).graph.node
            if n.op_type == "MatMul" and "/attention/self/MatMul" in n.name  # Q.K^T and scores.V
        ],
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def make(method: str, threads: int, corpus_texts: list[str], cache: Path) -> Any:
    from program.retrieval.embedder import Embedder

    if method == "before":
        return BatchedInt8(threads)
    if method == "after":
        return Embedder(backend="onnx-int8", threads=threads)
    if method == "onnx":
        return Embedder(backend="onnx", threads=threads)
    if method == "static":
        rng = np.random.default_rng(1)
        return static_int8([corpus_texts[i] for i in rng.choice(len(corpus_texts), 128, replace=False)], cache, threads)
    raise SystemExit(f"unknown method {method!r} (before, after, static, onnx)")


# ---- measures -------------------------------------------------------------------------------------
def rankings(doc_vecs: np.ndarray, qvecs: np.ndarray, bm25: list[list[int]]) -> tuple[list, list]:
    from program.retrieval import RetrieverConfig

    d = RetrieverConfig()
    dense = exact_dense(doc_vecs, qvecs)
    hybrid = [
        fuse_indices(x, b, d.dense_weight, d.bm25_weight, d.rrf_k, d.candidate_depth, max(KS))
        for x, b in zip(dense, bm25)
    ]
    return dense, hybrid


def quality(dense: list, hybrid: list, corpus: list, dev: list) -> dict:
    out = {}
    for name, ranks in (("dense", dense), ("hybrid", hybrid)):
        o = score_rankings(ranks, corpus, dev, ks=KS)["overall"]
        for k in KS:
            out[f"{name}_recall@{k}"] = round(o[f"recall@{k}"], 4)
            out[f"{name}_all_gold@{k}"] = round(o[f"all_gold@{k}"], 4)
    return out


def changed(a: list, b: list, k: int = 10) -> int:
    return sum(list(x[:k]) != list(y[:k]) for x, y in zip(a, b))


def invariance(emb: Any, questions: list[str], alone: np.ndarray, doc_vecs, bm25, base: tuple, seed: int = 0) -> list:
    rows = []
    for size in (*BATCHES, len(questions)):
        perm = np.random.default_rng(seed + size).permutation(len(questions))
        got = np.zeros_like(alone)
        for s in range(0, len(perm), size):
            idx = perm[s : s + size]
            got[idx] = emb.encode([questions[i] for i in idx])
        dense, hybrid = rankings(doc_vecs, got, bm25)
        rows.append(
            {
                "batch": size,
                "max_abs_diff": float(np.abs(got - alone).max()),
                "dense_top10_changed": changed(dense, base[0]),
                "hybrid_top10_changed": changed(hybrid, base[1]),
            }
        )
        log.info("invariance %s", rows[-1])
    return rows


def measure(method: str, emb: Any, corpus: list, texts: list[str], dev: list, bm25: list, n_latency: int) -> dict:
    emb.encode(["warm up"])
    vecs, secs = embed_sorted(emb, texts)
    log.info("%s: corpus embedded in %.1f s (%.1f p/s)", method, secs, len(texts) / secs)
    questions = [q.question for q in dev]
    times, alone = [], []
    for q in questions:
        t0 = time.perf_counter()
        alone.append(emb.encode([q]))
        times.append((time.perf_counter() - t0) * 1000)
    alone_vecs = np.concatenate(alone)
    base = rankings(vecs, alone_vecs, bm25)
    rng = np.random.default_rng(2)
    sample = rng.choice(len(texts), min(200, len(texts)), replace=False)
    passage_alone = np.concatenate([emb.encode([texts[i]]) for i in sample])
    return {
        "method": method,
        "corpus_seconds": round(secs, 1),
        "passages_per_second": round(len(texts) / secs, 1),
        "query_embed_ms": {
            "p50": round(float(np.percentile(times[:n_latency], 50)), 2),
            "p95": round(float(np.percentile(times[:n_latency], 95)), 2),
            "n": min(n_latency, len(times)),
        },
        "quality": quality(*base, corpus, dev),
        "invariance": invariance(emb, questions, alone_vecs, vecs, bm25, base),
        "passages_alone_vs_corpus_run_max_abs_diff": float(np.abs(passage_alone - vecs[sample]).max()),
        "vectors": vecs,
    }


# ---- report ---------------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = [
        f"# Embedding methods on {report['dataset']}: speed, quality, batch invariance",
        "",
        f"{report['machine']}; corpus {report['corpus_size']} passages; dev {report['dev_size']} questions; "
        f"{report['threads']} embedding threads. Generated {report['generated_at']} by `{report['command']}`.",
        "",
        "| method | corpus p/s | query embed p50 / p95 ms | dense R@5 | dense R@10 | dense AG@5 | dense AG@10 "
        "| hybrid R@5 | hybrid R@10 | hybrid AG@5 | hybrid AG@10 | cos to fp32 (min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["methods"]:
        q, lat = r["quality"], r["query_embed_ms"]
        cos = r.get("cosine_to_fp32")
        lines.append(
            f"| {r['method']} | {r['passages_per_second']} | {lat['p50']} / {lat['p95']} | "
            + " | ".join(f"{q[f'{m}_{s}@{k}']:.3f}" for m in ("dense", "hybrid") for s, k in _cells())
            + (f" | {cos['mean']:.4f} ({cos['min']:.4f})" if cos else " | -")
            + " |"
        )
    lines += [
        "",
        "R = recall, AG = all-gold; exact search, each question embedded alone; hybrid = the default weighted "
        "RRF over the default BM25.",
        "",
        "## Batch invariance: each dev question inside random batches vs alone",
        "",
        "| method | batch | max abs diff | dense top-10 changed | hybrid top-10 changed |",
        "|---|---|---|---|---|",
    ]
    for r in report["methods"]:
        for row in r["invariance"]:
            lines.append(
                f"| {r['method']} | {row['batch']} | {row['max_abs_diff']:.3g} | {row['dense_top10_changed']} | "
                f"{row['hybrid_top10_changed']} |"
            )
        lines.append(
            f"| {r['method']} | corpus run (200 passages) | {r['passages_alone_vs_corpus_run_max_abs_diff']:.3g} "
            "| - | - |"
        )
    lines.append("")
    return "\n".join(lines)


def _cells() -> list[tuple[str, int]]:
    return [("recall", 5), ("recall", 10), ("all_gold", 5), ("all_gold", 10)]


def measure_methods(
    methods: list[str], threads: int, corpus: list, texts: list[str], dev: list, bm25: list, n_latency: int, cache: Path
) -> list[dict]:
    """:func:`measure` for each method, then each method's cosine to the fp32 ``onnx`` vectors when measured."""
    rows, vectors, fp32 = [], [], None
    for method in methods:
        row = measure(method, make(method, threads, texts, cache), corpus, texts, dev, bm25, n_latency)
        vecs = row.pop("vectors")
        if method == "onnx":
            fp32 = vecs
        vectors.append(vecs)
        rows.append(row)
        log.info("%s: %s", method, {k: v for k, v in row.items() if k != "invariance"})
    if fp32 is not None:
        for row, vecs in zip(rows, vectors):
            cos = (vecs * fp32).sum(axis=1)
            row["cosine_to_fp32"] = {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}
    return rows


def main(argv: Sequence[str] | None = None) -> dict:
    log_progress()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="hotpotqa")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workspace", default=None)
    p.add_argument("--methods", default="before,after,static")
    p.add_argument(
        "--threads", type=int, default=None, help="Embedding threads (default SHARP_EMBED_THREADS or cores)."
    )
    p.add_argument("--latency-queries", type=int, default=200)
    args = p.parse_args(argv)

    from experiments import settings
    from experiments.runtime import index_name, load_dataset_corpus, load_questions
    from program.retrieval import RetrieverConfig
    from program.retrieval.dense import dense_document
    from program.retrieval.embedder import embed_threads

    ws = settings.workspace(args.workspace)
    out_dir = ws / "benchmarks"
    threads = args.threads or embed_threads()
    corpus = load_dataset_corpus(args.dataset, args.data_dir)
    dev = load_questions(args.dataset, "dev", args.data_dir)
    d = RetrieverConfig()
    texts = [dense_document(p, d.dense_text) for p in corpus]
    bm25 = LexicalVariants(corpus).rankings([q.question for q in dev], d.bm25_title_repeat, d.bm25_k1, d.bm25_b)
    report: dict[str, Any] = {
        "dataset": args.dataset,
        "corpus_size": len(corpus),
        "dev_size": len(dev),
        "threads": threads,
        **made_by("experiments.lab.studies.embedding", argv, ws),
    }
    methods = [m for m in args.methods.split(",") if m]
    report["methods"] = measure_methods(
        methods, threads, corpus, texts, dev, bm25, args.latency_queries, out_dir / "cache"
    )
    print(write_report(report, out_dir, f"embedding_{index_name(args.dataset)}", markdown))
    return report


if __name__ == "__main__":
    main()
