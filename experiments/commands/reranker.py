"""`sharp train-reranker`: fine-tune a cross-encoder on a train split, save it by name, log it to MLflow."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from experiments import options as o

if TYPE_CHECKING:
    from experiments.runtime import Runtime
    from optimize.reranker import RerankerTraining

log = logging.getLogger(__name__)


Name = typer.Option(None, "--name", help="Saved as WORKSPACE/rerankers/NAME (default: the dataset).")
Split = typer.Option("train", "--split", help="Questions to train on (never the split you report on).")
NTrain = typer.Option(None, "--n-train", help="Train on the first N seeded questions (default: all).")
Negatives = typer.Option(5, "--negatives", help="Hard negatives per question, from the retriever's top hits.")
Depth = typer.Option(30, "--depth", help="Hits per question the negatives are mined from.")
BatchSize = typer.Option(24, "--batch-size", help="Pairs per step (whole gold-and-negatives groups).")
MaxLength = typer.Option(128, "--max-length", help="Tokens per (question, passage) pair.")


def train_reranker(
    dataset: str = o.Dataset,
    name: str | None = Name,
    split: str = Split,
    n_train: int | None = NTrain,
    seed: int = typer.Option(0, "--seed"),
    epochs: int = typer.Option(3, "--epochs"),
    negatives: int = Negatives,
    depth: int = Depth,
    batch_size: int = BatchSize,
    max_length: int = MaxLength,
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
    from optimize.reranker import RerankerTraining
    from program.errors import ConfigError

    opts = o.Options.of(locals())
    training = o.pick(RerankerTraining, locals())
    negatives_from = {"second_hop": True, **opts.retriever_settings()}
    name = name or Path(dataset).stem.lower()
    out = settings.rerankers_dir(settings.workspace(workspace)) / name
    if out.exists() and not overwrite:
        raise ConfigError(f"a reranker named {name!r} exists at {out}; pass --overwrite or another --name")
    rt = o.build_runtime(opts, lms=False, track=not no_tracking)
    summary = _train(rt, out, split, n_train, training, negatives_from, track=not no_tracking, progress=not as_json)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    from experiments.render import console

    console.print(
        f"[green]reranker saved[/green] at {summary['folder']}: {summary['pairs']} pairs from {summary['questions']} "
        f"{split} questions, {summary['train_seconds']:.0f} s. Use it with --retriever-set reranker={summary['name']}"
    )


def _train(
    rt: Runtime,
    out: Path,
    split: str,
    n_train: int | None,
    training: RerankerTraining,
    negatives_from: dict,
    track: bool,
    progress: bool,
) -> dict:
    """Mine (question, passage) pairs with the retriever ``negatives_from`` sets up, train, save in ``out``
    (replacing what is there) and, with ``track``, log the run to MLflow (configured already)."""
    import shutil

    from experiments.runtime import config_hash, load_dataset_corpus
    from optimize.reranker import mine_pairs
    from program.retrieval.manifest import corpus_sha256

    examples = rt.examples(split, limit=n_train, seed=training.seed)
    passages = load_dataset_corpus(rt.dataset, rt.data_dir)
    by_title = {p.title: p for p in passages}
    retriever = rt.retriever(negatives_from)
    log.info("mining hard negatives for %d %s questions (top %d hits each)", len(examples), split, training.depth)
    pairs = mine_pairs(examples, retriever.retrieve_many, by_title, training.negatives, training.depth, training.seed)
    trained_on = {
        "name": out.name,
        "dataset": rt.dataset,
        "split": split,
        "corpus_sha256": corpus_sha256(passages),
        "question_ids_sha256": config_hash(sorted(str(e.id) for e in examples)),
        "negatives_from": negatives_from,
    }
    if out.exists():
        shutil.rmtree(out)
    return {**_fit(pairs, out, training, trained_on, track, progress), "folder": str(out)}


def _fit(pairs: list, out: Path, training: RerankerTraining, trained_on: dict, track: bool, progress: bool) -> dict:
    """Train from the bundled MiniLM weights and save in ``out``; with ``track``, as an MLflow run."""
    from experiments import tracking
    from optimize.reranker import train_reranker
    from program.retrieval.config import DEFAULT_EMBEDDING_MODEL
    from program.retrieval.embedder import resolve_model_path

    base = resolve_model_path(DEFAULT_EMBEDDING_MODEL)
    if not track:
        return train_reranker(pairs, base, out, training, trained_on, progress=progress)
    params = {**trained_on, "training": training.model_dump(), "pairs": len(pairs)}
    with tracking.run(f"train-reranker-{out.name}", params, tags={"kind": "train-reranker"}):
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
    return manifest


def register(app: typer.Typer) -> None:
    o.add_command(app, "train-reranker", train_reranker)
