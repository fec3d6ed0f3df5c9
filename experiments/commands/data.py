"""`sharp index`, `sharp retrieve`, `sharp eval-retrieval`: build, query and score retrieval.

Heavy libraries (chromadb, sentence-transformers, onnxruntime) load inside the commands, so
`sharp --help` stays fast.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import typer

from experiments import options as o

log = logging.getLogger(__name__)


Dataset = o.DATASET.but(help="hotpotqa | 2wikimultihopqa | musique | PATH (a folder with corpus.jsonl, or a file).")
Mode = o.RETRIEVER_MODE.but(default="hybrid", param_decls=("--mode", "-m"), help="dense | bm25 | hybrid.")
Rebuild = typer.Option(False, "--rebuild", help="Delete the index and build it anew.")
Verify = typer.Option(
    False,
    "--verify",
    help="Only check the built index: every file's size and sha256 against its manifest, the vectors' "
    "store; writes nothing (exit 2 and the repair command when damaged).",
)
BatchSize = typer.Option(None, "--batch-size", help="Texts per embedding batch, torch backend (default: the config's).")
Progress = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr.")


# ---- commands ------------------------------------------------------------------------------
@o.shared(Dataset, o.DATA_DIR, o.WORKSPACE, o.INDEX)
def index(
    opts: o.Options = o.SHARED,
    rebuild: bool = Rebuild,
    verify: bool = Verify,
    batch_size: int | None = BatchSize,
    progress: bool = Progress,
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as one JSON object."),
) -> None:
    """Build (or resume, repair, or --verify) the dense + BM25 index of a dataset's corpus."""
    rt = o.build_runtime(opts, lms=False, track=False)
    manifest = rt.verify_index() if verify else rt.build_index(progress, rebuild, batch_size)
    if as_json:
        extra = {"verified": True} if verify else {}
        sys.stdout.write(json.dumps({"index_dir": str(rt.index_dir()), **extra, **manifest}) + "\n")
    else:
        _show_index(rt.index_dir(), manifest, verify)


def _show_index(target: Path, manifest: dict, verified: bool) -> None:
    from experiments.console.terminal import console

    if verified:
        from program.retrieval.integrity import checked as checked_files

        checked = len(checked_files(manifest.get("files") or {}))
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


@o.shared(Dataset, o.DATA_DIR, o.WORKSPACE, Mode, o.INDEX)
def retrieve(
    query: str = typer.Argument(..., help="The search query."),
    opts: o.Options = o.SHARED,
    k: int = typer.Option(5, "-k", "--k", help="Passages to return."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with the passages."),
) -> None:
    """Retrieve passages for a query from a built index (a Rich table, or --json)."""
    rt = o.build_runtime(opts, lms=False, track=False)
    retriever = rt.retriever()
    start = time.perf_counter()
    hits = retriever.retrieve(query, k)
    ms = (time.perf_counter() - start) * 1000
    mode = rt.retriever_settings().mode
    if as_json:
        out = {
            "query": query,
            "mode": mode,
            "k": k,
            "latency_ms": round(ms, 2),
            "passages": [p.to_dict() for p in hits],
        }
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
        return
    from rich.table import Table

    from experiments.console.terminal import console

    table = Table(title=f"{mode} top-{k} for: {query[:80]}", caption=f"{ms:.0f} ms")
    for col in ("#", "score", "title", "text"):
        table.add_column(col, overflow="fold")
    for i, p in enumerate(hits, start=1):
        table.add_row(str(i), f"{p.score:.4f}", p.title, p.text[:160] + ("..." if len(p.text) > 160 else ""))
    console.print(table)


@o.shared(Dataset, o.DATA_DIR, o.WORKSPACE, Mode, o.INDEX)
def eval_retrieval(
    split: str = typer.Option("dev", "--split", help="Question split (dev, train)."),
    opts: o.Options = o.SHARED,
    k: int = typer.Option(10, "-k", "--k", help="Depth to score (recall/precision/all-gold at 2, 5, 10, 20 up to k)."),
    limit: int | None = typer.Option(None, "--limit", help="Score a seeded sample of N questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --limit sample."),
    as_json: bool = typer.Option(
        False, "--json", help="Print ONE JSON object with the aggregate metrics (logs go to stderr)."
    ),
) -> None:
    """Score retrieval against the gold titles of a split: recall@k, precision@k, all-gold@k."""
    from experiments import settings
    from program.retrieval import open_retriever
    from program.retrieval.manifest import corpus_sha256

    rt = o.build_runtime(opts, lms=False, track=False)
    cfg = rt.retriever_settings()
    questions = rt.examples(split, limit, seed)
    retriever = open_retriever(
        rt.index_dir(),
        cfg,
        corpus_sha256=corpus_sha256(rt.source.corpus()),
        dataset=rt.source.ref(),
        rerankers_dir=settings.rerankers_dir(rt.workspace),
    )
    from experiments.jobs.evaluation import evaluate_retriever

    metrics, latency = evaluate_retriever(retriever, questions, k)
    result = {
        "dataset": opts.dataset,
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
    else:
        _show_retrieval(metrics, f"retrieval {cfg.mode} on {opts.dataset}/{split}")


def _show_retrieval(metrics: dict, title: str) -> None:
    from rich.table import Table

    from experiments.console.terminal import console

    rows = {"all": metrics["overall"], **metrics["by_type"]}
    ks = sorted({int(c.split("@")[1]) for c in metrics["overall"] if "@" in c})
    cols = [(f"R@{kk}", f"recall@{kk}") for kk in ks] + [(f"AG@{kk}", f"all_gold@{kk}") for kk in ks]
    cols.append((f"P@{ks[-1]}", f"precision@{ks[-1]}") if ks else ("P", "precision"))
    table = Table(title=title, caption="R recall, AG all gold titles retrieved, P precision; by question type")
    for head in ["type", "n", *(h for h, _ in cols)]:
        table.add_column(head, justify="right", no_wrap=True)
    for name, m in rows.items():
        table.add_row(name, str(m.get("n", 0)), *[f"{m[key]:.3f}" if key in m else "-" for _, key in cols])
    console.print(table)


def register(app: typer.Typer) -> None:
    o.add_command(app, "index", index)
    o.add_command(app, "retrieve", retrieve)
    o.add_command(app, "eval-retrieval", eval_retrieval)
