"""`sharp index`, `sharp retrieve`, `sharp eval-retrieval`: build, query and score retrieval.

Heavy libraries (chromadb, sentence-transformers, onnxruntime) load inside the commands, so
`sharp --help` stays fast.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from experiments import options as o

log = logging.getLogger(__name__)


IndexDir = typer.Option(None, "--index-dir", help="Index folder (default: WORKSPACE/indexes/<dataset>).")
Backend = typer.Option(None, "--backend", help="Embedding runtime: torch | onnx | onnx-int8 (default: the config's).")
Mode = typer.Option("hybrid", "--mode", "-m", help="dense | bm25 | hybrid.")
Dataset = typer.Option(
    "hotpotqa",
    "--dataset",
    "-d",
    help="hotpotqa | 2wikimultihopqa | musique | PATH (a folder with corpus.jsonl, or a file).",
)
RetrieverConfigFile = typer.Option(None, "--retriever-config", help="YAML/JSON file with RetrieverConfig keys.")
RetrieverSet = typer.Option(None, "--set", help="Override one RetrieverConfig key: --set rrf_k=30 (repeatable).")


# ---- helpers shared with experiments/benchmarks/retrieval.py --------------------------------
def index_name(dataset: str) -> str:
    """The folder name under WORKSPACE/indexes for a dataset name or path (as Runtime uses)."""
    from experiments.runtime import dataset_source

    return dataset_source(dataset).name


def resolve_index_dir(dataset: str, workspace: Path | None, index_dir: Path | None) -> Path:
    from experiments import settings

    return Path(index_dir) if index_dir else settings.index_dir(index_name(dataset), settings.workspace(workspace))


def _rerankers(workspace: Path | None) -> Path:
    from experiments import settings

    return settings.rerankers_dir(settings.workspace(workspace))


def load_questions(dataset: str, split: str, data_dir: Path | None, limit: int | None = None, seed: int = 0) -> list:
    """Questions of a split: a named dataset, a folder holding SPLIT.json(l), or a question file."""
    from data.loaders import load_examples
    from experiments.runtime import dataset_source

    return load_examples(dataset_source(dataset, data_dir), split, limit=limit, seed=seed)


def retriever_config(
    mode: str | None = None,
    backend: str | None = None,
    config_file: Path | None = None,
    sets: list[str] | None = None,
    chroma_url: str | None = None,
) -> Any:
    from program.retrieval import RetrieverConfig

    values = {**o.read_mapping(config_file), **o.parse_sets(sets)}
    return RetrieverConfig.from_mapping(values, mode=mode, backend=backend, chroma_url=chroma_url)


def _target(dataset: str, data_dir: Path | None, workspace: Path | None, index_dir: Path | None, cfg: Any):
    """(dataset source, index folder), after checking the Chroma server when one is asked for: the
    one resolution of --dataset (experiments/runtime.py dataset_source), before any expensive work."""
    from experiments import settings
    from experiments.runtime import dataset_source
    from program.retrieval.store import check_server

    source = dataset_source(dataset, data_dir)
    target = Path(index_dir) if index_dir else settings.index_dir(source.name, settings.workspace(workspace))
    if cfg.chroma_url:
        check_server(cfg.chroma_url, target)
    return source, target


def _fail(exc: Exception) -> None:
    from rich.markup import escape

    from experiments.render import err_console

    err_console.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(2)


# ---- commands ------------------------------------------------------------------------------
def index(
    dataset: str = Dataset,
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    index_dir: Path | None = IndexDir,
    rebuild: bool = typer.Option(False, "--rebuild", help="Delete the index and build it anew."),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="Only check the built index: every file's size and sha256 against its manifest, the vectors' "
        "store; writes nothing (exit 2 and the repair command when damaged).",
    ),
    backend: str | None = Backend,
    batch_size: int | None = typer.Option(
        None, "--batch-size", help="Texts per embedding batch, torch backend (default: the config's)."
    ),
    config_file: Path | None = RetrieverConfigFile,
    set_: list[str] | None = RetrieverSet,
    chroma_url: str | None = o.ChromaUrl,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as one JSON object."),
) -> None:
    """Build (or resume, repair, or --verify) the dense + BM25 index of a dataset's corpus."""
    from program.errors import SharpError

    try:
        from data.indexing import build_index, verify_index

        cfg = retriever_config(None, backend, config_file, set_, chroma_url)
        source, target = _target(dataset, data_dir, workspace, index_dir, cfg)
        if verify:
            manifest = verify_index(target, cfg, dataset=source.ref())
        else:
            manifest = build_index(
                source.corpus(),
                target,
                cfg,
                batch_size=batch_size,
                progress=progress,
                rebuild=rebuild,
                dataset=source.ref(),
            )
    except SharpError as exc:
        _fail(exc)
    if as_json:
        sys.stdout.write(
            json.dumps({"index_dir": str(target), **({"verified": True} if verify else {}), **manifest}) + "\n"
        )
        return
    from experiments.render import console

    if verify:
        checked = len(manifest.get("files") or {})
        console.print(
            f"[green]index verified[/green] at {target}: "
            + (
                f"{checked} files match their sizes and sha256"
                if checked
                else "no file records (built before format 2)"
            )
            + f"; {manifest['num_passages']} passages in both parts"
        )
        return
    t = manifest.get("timings") or {}
    console.print(
        f"[green]index ready[/green] at {target}: {manifest['num_passages']} passages, "
        f"{manifest['embedding_model']} ({manifest['dimension']}-d, {manifest.get('embedding_method') or manifest['backend']})"
        + (f"; built in {t['build_seconds']:.0f} s" if t.get("build_seconds") else "")
    )


def retrieve(
    query: str = typer.Argument(..., help="The search query."),
    dataset: str = Dataset,
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    index_dir: Path | None = IndexDir,
    mode: str = Mode,
    k: int = typer.Option(5, "-k", "--k", help="Passages to return."),
    backend: str | None = Backend,
    config_file: Path | None = RetrieverConfigFile,
    set_: list[str] | None = RetrieverSet,
    chroma_url: str | None = o.ChromaUrl,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with the passages."),
) -> None:
    """Retrieve passages for a query from a built index (a Rich table, or --json)."""
    from program.errors import SharpError
    from program.retrieval import open_retriever

    try:
        cfg = retriever_config(mode, backend, config_file, set_, chroma_url)
        source, target = _target(dataset, data_dir, workspace, index_dir, cfg)
        retriever = open_retriever(target, cfg, dataset=source.ref(), rerankers_dir=_rerankers(workspace))
        start = time.perf_counter()
        hits = retriever.retrieve(query, k)
        ms = (time.perf_counter() - start) * 1000
    except SharpError as exc:
        _fail(exc)
    if as_json:
        out = {
            "query": query,
            "mode": cfg.mode,
            "k": k,
            "latency_ms": round(ms, 2),
            "passages": [p.to_dict() for p in hits],
        }
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        return
    from rich.table import Table

    from experiments.render import console

    table = Table(title=f"{cfg.mode} top-{k} for: {query[:80]}", caption=f"{ms:.0f} ms")
    for col in ("#", "score", "title", "text"):
        table.add_column(col, overflow="fold")
    for i, p in enumerate(hits, start=1):
        table.add_row(str(i), f"{p.score:.4f}", p.title, p.text[:160] + ("..." if len(p.text) > 160 else ""))
    console.print(table)


def evaluate_retriever(
    retriever: Any, questions: list, k: int, batch: int = 32, ks: Sequence[int] | None = None
) -> tuple[dict, dict]:
    """(metrics from optimize.retrieval_metrics.aggregate, latency summary) for questions at the cutoffs
    ``ks`` (default 2, 5, 10, 20 up to k, and k); the latency is that of asking for the largest cutoff.

    A retriever whose top-k is not the prefix of its top-K (``depends_on_k``: the second hop gives a share
    of k to hop passages) is asked once per cutoff, so each @cutoff scores what a system asking for that
    many passages gets."""
    import numpy as np

    from optimize.retrieval_metrics import aggregate

    ks = sorted(set(ks) if ks else {kk for kk in (2, 5, 10, 20) if kk <= k} | {k})
    asks = [(kk, [kk]) for kk in ks] if getattr(retriever, "depends_on_k", False) else [(max(ks), ks)]
    metrics: dict = {"overall": {}, "by_type": {}}
    per_query_ms = []
    for depth, cutoffs in asks:
        rows = []
        for start in range(0, len(questions), batch):
            chunk = questions[start : start + batch]
            t0 = time.perf_counter()
            hits = retriever.retrieve_many([ex.question for ex in chunk], depth)
            if depth == max(ks):
                per_query_ms.append((time.perf_counter() - t0) * 1000 / len(chunk))
            rows += [(ex.get("type"), [p.title for p in h], ex.get("gold_titles") or []) for ex, h in zip(chunk, hits)]
        part = aggregate(rows, cutoffs)
        metrics["overall"].update(part["overall"])
        for qtype, values in part["by_type"].items():
            metrics["by_type"].setdefault(qtype, {}).update(values)
        metrics["skipped"] = part["skipped"]
    return metrics, {"batched_ms_per_query": round(float(np.mean(per_query_ms)), 2) if per_query_ms else None}


def eval_retrieval(
    dataset: str = Dataset,
    split: str = typer.Option("dev", "--split", help="Question split (dev, train)."),
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    index_dir: Path | None = IndexDir,
    mode: str = Mode,
    k: int = typer.Option(10, "-k", "--k", help="Depth to score (recall/precision/all-gold at 2, 5, 10, 20 up to k)."),
    limit: int | None = typer.Option(None, "--limit", help="Score a seeded sample of N questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --limit sample."),
    backend: str | None = Backend,
    config_file: Path | None = RetrieverConfigFile,
    set_: list[str] | None = RetrieverSet,
    chroma_url: str | None = o.ChromaUrl,
    as_json: bool = typer.Option(
        False, "--json", help="Print ONE JSON object with the aggregate metrics (logs go to stderr)."
    ),
) -> None:
    """Score retrieval against the gold titles of a split: recall@k, precision@k, all-gold@k."""
    from data.loaders import load_examples
    from program.errors import SharpError
    from program.retrieval import open_retriever
    from program.retrieval.manifest import corpus_sha256

    try:
        cfg = retriever_config(mode, backend, config_file, set_, chroma_url)
        source, target = _target(dataset, data_dir, workspace, index_dir, cfg)
        questions = load_examples(source, split, limit=limit, seed=seed)
        corpus_hash = corpus_sha256(source.corpus())
        retriever = open_retriever(
            target, cfg, corpus_sha256=corpus_hash, dataset=source.ref(), rerankers_dir=_rerankers(workspace)
        )
        metrics, latency = evaluate_retriever(retriever, questions, k)
    except SharpError as exc:
        _fail(exc)
    result = {
        "dataset": dataset,
        "split": split,
        "mode": cfg.mode,
        "k": k,
        "n": metrics["overall"].get("n", 0),
        "limit": limit,
        "seed": seed,
        **metrics,
        "latency": latency,
        "config": cfg.model_dump(exclude={"onnx_cache_dir"}),
    }
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    from rich.table import Table

    from experiments.render import console

    rows = {"all": metrics["overall"], **metrics["by_type"]}
    ks = sorted({int(c.split("@")[1]) for c in metrics["overall"] if "@" in c})
    cols = [(f"R@{kk}", f"recall@{kk}") for kk in ks] + [(f"AG@{kk}", f"all_gold@{kk}") for kk in ks]
    cols.append((f"P@{ks[-1]}", f"precision@{ks[-1]}") if ks else ("P", "precision"))
    table = Table(
        title=f"retrieval {cfg.mode} on {dataset}/{split}",
        caption="R recall, AG all gold titles retrieved, P precision; by question type",
    )
    for head in ["type", "n", *(h for h, _ in cols)]:
        table.add_column(head, justify="right", no_wrap=True)
    for name, m in rows.items():
        table.add_row(name, str(m.get("n", 0)), *[f"{m[key]:.3f}" if key in m else "-" for _, key in cols])
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("index")(index)
    app.command("retrieve")(retrieve)
    app.command("eval-retrieval")(eval_retrieval)
