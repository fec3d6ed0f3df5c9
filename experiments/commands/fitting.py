"""Rerankers trained here, each saved by name and logged to MLflow.

`sharp train-reranker` fine-tunes a cross-encoder on a train split; `sharp fit-ranker` fits the evidence
ranker (a logistic regression over a candidate pool's features, no model weights) on one.
"""

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
    from optimize.reranker_training import RerankerTraining

log = logging.getLogger(__name__)


Name = typer.Option(None, "--name", help="Saved as WORKSPACE/rerankers/NAME (default: the dataset).")
Split = typer.Option("train", "--split", help="Questions to train on (never the split you report on).")
NTrain = typer.Option(None, "--n-train", help="Train on the first N seeded questions (default: all).")
Negatives = typer.Option(5, "--negatives", help="Hard negatives per question, from the retriever's top hits.")
Depth = typer.Option(30, "--depth", help="Hits per question the negatives are mined from.")
BatchSize = typer.Option(24, "--batch-size", help="Pairs per step (whole gold-and-negatives groups).")
MaxLength = typer.Option(128, "--max-length", help="Tokens per (question, passage) pair.")


@o.shared(o.WHERE, o.TRACKING_URI, o.RETRIEVER_SET)
def train_reranker(
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
    opts: o.Options = o.SHARED,
    no_tracking: bool = typer.Option(False, "--no-tracking", help="Do not log to MLflow."),
    as_json: bool = typer.Option(False, "--json", help="Print the reranker's manifest as one JSON object."),
) -> None:
    """Train a cross-encoder reranker (from the bundled MiniLM weights) on a train split, on CPU.

    Positives are each question's supporting paragraphs, negatives the best-ranked other passages the
    retriever returns for it (the second hop included by default). Use it with
    `--retriever-set reranker=NAME` (any system) or the `vanilla-rerank` system."""
    from experiments import settings
    from optimize.reranker_training import RerankerTraining
    from program.errors import ConfigError

    training = RerankerTraining(
        negatives=negatives, depth=depth, epochs=epochs, batch_size=batch_size, max_length=max_length, seed=seed
    )
    negatives_from = {"second_hop": True, **opts.retriever_settings()}
    name = name or Path(opts.dataset).stem.lower()
    out = settings.rerankers_dir(settings.workspace(opts.workspace)) / name
    if out.exists() and not overwrite:
        raise ConfigError(f"a reranker named {name!r} exists at {out}; pass --overwrite or another --name")
    rt = o.build_runtime(opts, lms=False, track=not no_tracking)
    summary = _train(rt, out, split, n_train, training, negatives_from, track=not no_tracking, progress=not as_json)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    from experiments.console.terminal import console

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
    from optimize.reranker_training import mine_pairs
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
    from optimize.reranker_training import train_reranker
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


# what every fitting command takes: replace an existing fit, print the outcome as JSON
Overwrite = typer.Option(False, "--overwrite", help="Replace a fitted model of the same name.")
AsJson = typer.Option(False, "--json", help="Print what was fitted and measured as one JSON object.")
RankerName = typer.Option(None, "--name", help="Saved as WORKSPACE/rankers/NAME.json (default: the dataset's name).")
RankerNTrain = typer.Option(
    None,
    "--n-train",
    help="Fit on the first N seeded train questions (default: 80% of the split); the rest are held out and reported.",
)


@o.shared(o.WHERE, o.TRACKING_URI, o.RETRIEVER_SET)
def fit_ranker(
    name: str | None = RankerName,
    n_train: int | None = RankerNTrain,
    seed: int = typer.Option(0, "--seed"),
    c: float = typer.Option(1.0, "--c", help="Inverse regularisation strength of the logistic regression."),
    depth: int = typer.Option(20, "--depth", help="Hits per search pooled (the query's and the second hop's)."),
    link_from: int = typer.Option(5, "--link-from", help="Top hits whose title links join the pool."),
    overwrite: bool = Overwrite,
    opts: o.Options = o.SHARED,
    no_tracking: bool = typer.Option(False, "--no-tracking", help="Do not log to MLflow."),
    as_json: bool = AsJson,
) -> None:
    """Fit the evidence ranker on train questions' gold paragraphs (no LM call, seconds on a CPU).

    Each question's pool is its hybrid hits, its second hop's hits and the passages its top hits name by
    title; the ranker learns which are gold. Its all-gold@k on the held-out train questions is reported next
    to the hybrid order's. Use it with `--retriever-set ranker=NAME` (any system)."""
    from experiments import rankers, settings
    from program.errors import ConfigError

    name = name or Path(opts.dataset).stem.lower()
    out = rankers.rankers_dir(settings.workspace(opts.workspace)) / f"{name}.json"
    if out.exists() and not overwrite:
        raise ConfigError(f"a ranker named {name!r} exists at {out}; pass --overwrite or another --name")
    if depth < 1 or link_from < 0:
        raise ConfigError(f"--depth must be >= 1 and --link-from >= 0 (got {depth}, {link_from})")
    rt = o.build_runtime(opts, lms=False, track=not no_tracking)
    summary = rankers.fit_from_runtime(
        rt, out, n_train, seed, c, {"depth": depth, "link_from": link_from}, not no_tracking
    )
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    from experiments.console.render import ranker_table
    from experiments.console.terminal import console

    console.print(ranker_table(summary))
    console.print(f"[green]ranker saved[/green] at {out}. Use it with --retriever-set ranker={name}")


@o.shared(o.WHERE, o.RETRIEVER_SET)
def fit_selector(
    n_train: int = typer.Option(..., "--n-train", help="Fit on the first N seeded train questions."),
    n_heldout: int = typer.Option(100, "--n-heldout", help="Report coverage on the next N."),
    passages: int = typer.Option(5, "--passages", help="Ranked passages a question's sentences come from."),
    budget: int = typer.Option(10, "--budget", help="Sentences shown in all (coverage is reported around it)."),
    overwrite: bool = Overwrite,
    opts: o.Options = o.SHARED,
    as_json: bool = AsJson,
) -> None:
    """Fit the sentence selector on train questions' supporting facts (no LM call): the sentences of the ranked
    passages SHARP's draft reads with `--config WORKSPACE/selectors/DATASET.json`.
    Its coverage of the gold sentences on the next train questions is reported beside whole passages'."""
    from experiments import settings
    from experiments.jobs.selectors import fit_from_runtime, save_selector, selectors_dir
    from program.errors import ConfigError

    out = selectors_dir(settings.workspace(opts.workspace)) / f"{Path(opts.dataset).stem.lower()}.json"
    if out.exists() and not overwrite:
        raise ConfigError(f"a selector exists at {out}; pass --overwrite")
    rt = o.build_runtime(opts, lms=False, track=False)
    budgets = tuple(sorted({max(1, budget - 2), budget, budget + 2}))
    selector, summary = fit_from_runtime(rt, n_train, n_heldout, passages, budgets)
    summary["selector"] = str(save_selector(selector, out, passages, budget))
    if as_json:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
        return
    typer.echo(f"sentence selector: {out} (fitted on {summary['fit']['questions']} questions)")
    for name, cov in summary["coverage"].items():
        typer.echo(f"  {name}: gold sentences shown {cov['gold_sentence_recall']:.3f}, every one "
                   f"{cov['all_gold_sentences']:.3f}, {cov['chars_per_q']:.0f} chars a question")  # fmt: skip


def register(app: typer.Typer) -> None:
    o.add_command(app, "train-reranker", train_reranker)
    o.add_command(app, "fit-ranker", fit_ranker)
    o.add_command(app, "fit-selector", fit_selector)
