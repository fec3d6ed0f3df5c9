"""Evidence rankers by name: where `sharp fit-ranker` saves them and how `--retriever-set ranker=NAME` finds one.

A ranker file is the :class:`~program.retrieval.ranked.EvidenceRanker` as JSON (plain numbers, what it was
fitted on, a digest). A name is looked up as a path, then ``WORKSPACE/rankers/NAME.json``, then the rankers
shipped with the package (``program/compiled/rankers/NAME.json``). The runtime replaces the name by the
numbers before anything is built, so saved programs, result files and arena folders record the ranker
itself, not a name that a refit could change.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from program.errors import ConfigError, StorageError
from program.serving.shipped import COMPILED_DIR
from program.systems.modes import DATASET_RANKER

log = logging.getLogger(__name__)

SHIPPED_RANKERS = COMPILED_DIR / "rankers"


class RankerNotFoundError(ConfigError):
    """No ranker file of that name or path."""


def rankers_dir(ws: Path) -> Path:
    return ws / "rankers"


def ranker_path(ref: str, ws: Path, dataset: str | None = None) -> Path:
    """The file ``ref`` names (RankerNotFoundError listing the known names and the command that fits one)."""
    candidates = [Path(ref).expanduser()] if ("/" in ref or ref.endswith(".json")) else []
    candidates += [rankers_dir(ws) / f"{ref}.json", SHIPPED_RANKERS / f"{ref}.json"]
    for path in candidates:
        if path.is_file():
            return path
    known = sorted({p.stem for d in (rankers_dir(ws), SHIPPED_RANKERS) if d.is_dir() for p in d.glob("*.json")})
    raise RankerNotFoundError(
        f"no evidence ranker {ref!r} (looked in {', '.join(str(c) for c in candidates)}); known: "
        f"{', '.join(known) or 'none'}. Fit one with `{fit_command(ref, ws, dataset)}`"
    )


def fit_command(ref: str, ws: Path, dataset: str | None) -> str:
    import shlex

    name = Path(ref).stem
    return (
        f"sharp fit-ranker --dataset {shlex.quote(dataset) if dataset else 'DATASET'} "
        f"--workspace {shlex.quote(str(ws))} --name {shlex.quote(name)}"
    )


def load_ranker(ref: str, ws: Path, dataset: str | None = None) -> dict[str, Any]:
    """The ranker ``ref`` names, validated (digest, features), as the mapping RetrieverConfig takes."""
    from program.retrieval.ranked import EvidenceRanker

    path = ranker_path(ref, ws, dataset)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not a readable ranker file ({exc}); refit it with `sharp fit-ranker`") from None
    try:
        return EvidenceRanker.from_mapping(data).model_dump(mode="json")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def resolve(retriever_config: dict[str, Any], ws: Path, dataset: str | None = None) -> dict[str, Any]:
    """``retriever_config`` with a ranker given by name replaced by its numbers ("dataset": the ranker named
    after the dataset, e.g. ``hotpotqa``, or a dataset folder's name)."""
    ref = retriever_config.get("ranker")
    if ref == DATASET_RANKER:
        if not dataset:
            raise ConfigError("ranker=dataset names the dataset's own evidence ranker, but no dataset is given")
        ref = Path(str(dataset)).name
    if isinstance(ref, str):
        return {**retriever_config, "ranker": load_ranker(ref, ws, dataset)}
    return retriever_config


def save_ranker(ranker: Any, path: Path) -> Path:
    """Write the ranker's JSON whole or not at all (StorageError naming the file when it cannot be written)."""
    from optimize.evaluate import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    write_atomic(path, json.dumps(ranker.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return path


# ---- fitting (`sharp fit-ranker`, `sharp build`'s ranker step) ----------------------------------------------
def _pooled_cases(rt: Any, examples: list, pool: dict) -> tuple[list[dict], dict]:
    """Each question's candidate pool as a ranker case (the hybrid retriever, no second hop, no ranker),
    and the pool settings used."""
    from optimize.evidence_ranker import ranker_case
    from program.retrieval.ranked import POOL_DEFAULTS, CandidatePools

    settings = rt.retriever_settings({"second_hop": False, "ranker": None})
    if settings.mode != "hybrid":
        raise ConfigError(f"the evidence ranker reads dense and BM25 ranks: it needs mode=hybrid, not {settings.mode}")
    hybrid = rt.retriever({"second_hop": False, "ranker": None})
    pool_settings = {**POOL_DEFAULTS, "seed_chars": settings.hop_seed_chars, **pool}
    pools = CandidatePools(hybrid, hybrid.bm25.passages, **pool_settings)
    cases = []
    for n, ex in enumerate(examples, 1):
        cases.append(ranker_case(ex, pools.pools([ex.question])[0]))
        if n % 100 == 0 or n == len(examples):
            log.info("pooled %d / %d train questions", n, len(examples))
    return cases, pool_settings


def fit_from_runtime(rt: Any, out: Path, n_train: int | None, seed: int, c: float, pool: dict, track: bool) -> dict:
    """Pool every train question, fit on the first ``n_train``, score the rest, save to ``out`` and, with
    ``track``, log the run to MLflow."""
    from optimize.evidence_ranker import fit_ranker as fit
    from optimize.evidence_ranker import hybrid_order, pool_scores
    from program.digest import digest

    examples = rt.examples("train", limit=1 << 30, seed=seed)
    n_train = int(round(len(examples) * 0.8)) if n_train is None else n_train
    if not 1 <= n_train <= len(examples):
        raise ConfigError(f"--n-train must be between 1 and {len(examples)} (the train split), got {n_train}")
    cases, pool_settings = _pooled_cases(rt, examples, pool)
    train, held = cases[:n_train], cases[n_train:]
    fitted_on = {
        "dataset": str(rt.dataset),
        "split": "train",
        "corpus_sha256": rt.index_manifest().get("corpus_sha256"),
        "question_ids_sha256": digest(sorted(case["id"] for case in train), 12),  # as config_hash (runtime.py)
        "n_train": len(train),
        "seed": seed,
        "pool": pool_settings,
    }
    ranker = fit(train, c, fitted_on=fitted_on)
    scores = {"train": pool_scores(train, ranker.probability)}
    if held:
        scores |= {
            "held_out": pool_scores(held, ranker.probability),
            "held_out_hybrid": pool_scores(held, hybrid_order),
        }
    ranker = ranker.with_info(scores=scores)
    summary = {"name": out.stem, "file": str(out), "fitted_on": fitted_on, "scores": scores, "C": c}
    if not track:
        save_ranker(ranker, out)
        return summary
    from experiments import tracking

    with tracking.run(f"fit-ranker-{out.stem}", {**fitted_on, "C": c}, tags={"kind": "fit-ranker"}):
        tracking.log_metrics(scores)
        tracking.log_json(ranker.model_dump(mode="json"), f"{out.stem}.json")
        save_ranker(ranker, out)
    return summary
