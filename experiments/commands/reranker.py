"""`sharp train-reranker`: fine-tune a cross-encoder on a train split, save it by name, log it to MLflow."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

from experiments import options as o

log = logging.getLogger(__name__)


def train_reranker(
    dataset: str = o.Dataset,
    name: str | None = typer.Option(None, "--name", help="Saved as WORKSPACE/rerankers/NAME (default: the dataset)."),
    split: str = typer.Option("train", "--split", help="Questions to train on (never the split you report on)."),
    n_train: int | None = typer.Option(None, "--n-train", help="Train on the first N seeded questions (default: all)."),
    seed: int = typer.Option(0, "--seed"),
    epochs: int = typer.Option(3, "--epochs"),
    negatives: int = typer.Option(5, "--negatives", help="Hard negatives per question, from the retriever's top hits."),
    depth: int = typer.Option(30, "--depth", help="Hits per question the negatives are mined from."),
    batch_size: int = typer.Option(24, "--batch-size", help="Pairs per step (whole gold-and-negatives groups)."),
    max_length: int = typer.Option(128, "--max-length", help="Tokens per (question, passage) pair."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a reranker of the same name."),
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    tracking_uri: str | None = o.TrackingUri,
    no_tracking: bool = typer.Option(False, "--no-tracking", help="Do not log to MLflow."),
    retriever_set: list[str] | None = o.RetrieverSet,
    as_json: bool = typer.Option(False, "--json", help="Print the reranker's manifest as one JSON object."),
) -> None:
    """Train a cross-encoder reranker (from the bundled MiniLM weights) on a train split, on CPU.

    Positives are each question's supporting paragraphs, negatives the best-ranked other passages the
    retriever returns for it (the second hop included by default). Use it with
    `--retriever-set reranker=NAME` (any system) or the `vanilla-rerank` system."""
    from experiments import settings
    from experiments.render import err_console
    from program.errors import SharpError

    try:
        summary = _train(
            dataset,
            name or Path(dataset).stem.lower(),
            split,
            n_train,
            seed,
            epochs,
            negatives,
            depth,
            batch_size,
            max_length,
            overwrite,
            data_dir,
            settings.workspace(workspace),
            tracking_uri,
            no_tracking,
            o.parse_sets(retriever_set),
            progress=not as_json,
        )
    except SharpError as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    from experiments.render import console

    console.print(
        f"[green]reranker saved[/green] at {summary['folder']}: {summary['pairs']} pairs from {summary['questions']} "
        f"{split} questions, {summary['train_seconds']:.0f} s. Use it with --retriever-set reranker={summary['name']}"
    )


def _train(
    dataset,
    name,
    split,
    n_train,
    seed,
    epochs,
    negatives,
    depth,
    batch_size,
    max_length,
    overwrite,
    data_dir,
    ws,
    tracking_uri,
    no_tracking,
    retriever_set,
    progress,
) -> dict:
    import shutil

    from experiments import settings, tracking
    from experiments.runtime import Runtime, config_hash, load_dataset_corpus
    from optimize.reranker import RerankerTraining, mine_pairs, train_reranker
    from program.errors import ConfigError
    from program.retrieval.config import DEFAULT_EMBEDDING_MODEL
    from program.retrieval.embedder import resolve_model_path
    from program.retrieval.manifest import corpus_sha256

    out = settings.rerankers_dir(ws) / name
    if out.exists() and not overwrite:
        raise ConfigError(f"a reranker named {name!r} exists at {out}; pass --overwrite or another --name")
    rt = Runtime(dataset=dataset, data_dir=data_dir, workspace=ws)
    examples = rt.examples(split, limit=n_train, seed=seed)
    passages = load_dataset_corpus(dataset, data_dir)
    by_title = {p.title: p for p in passages}
    retriever = rt.retriever({"second_hop": True, **retriever_set})
    training = RerankerTraining(
        negatives=negatives, depth=depth, epochs=epochs, batch_size=batch_size, max_length=max_length, seed=seed
    )
    log.info("mining hard negatives for %d %s questions (top %d hits each)", len(examples), split, depth)
    pairs = mine_pairs(examples, retriever.retrieve_many, by_title, negatives, depth, seed)
    trained_on = {
        "name": name,
        "dataset": rt.dataset,
        "split": split,
        "corpus_sha256": corpus_sha256(passages),
        "question_ids_sha256": config_hash(sorted(str(e.id) for e in examples)),
        "negatives_from": {"second_hop": True, **retriever_set},
    }
    if out.exists():
        shutil.rmtree(out)
    base = resolve_model_path(DEFAULT_EMBEDDING_MODEL)
    if no_tracking:
        manifest = train_reranker(pairs, base, out, training, trained_on, progress=progress)
    else:
        tracking.configure(tracking_uri, ws)
        params = {**trained_on, "training": training.model_dump(), "pairs": len(pairs)}
        with tracking.run(f"train-reranker-{name}", params, tags={"kind": "train-reranker"}):
            manifest = train_reranker(
                pairs,
                base,
                out,
                training,
                trained_on,
                progress=progress,
                on_log=lambda logs: tracking.log_metrics({k: v for k, v in logs.items() if k != "step"}, logs["step"]),
            )
            tracking.log_metrics({"train_seconds": manifest["train_seconds"], "pairs": manifest["pairs"]})
            tracking.log_json(manifest, "reranker.json")
    return {**manifest, "folder": str(out)}


def register(app: typer.Typer) -> None:
    app.command("train-reranker")(train_reranker)
