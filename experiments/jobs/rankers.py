"""Evidence rankers by name: where `sharp fit-ranker` saves them and how `--retriever-set ranker=NAME` finds one.

A ranker file is the :class:`~program.retrieval.ranked.EvidenceRanker` as JSON (plain numbers, what it was
fitted on, a digest). A name is looked up as a path, then ``WORKSPACE/rankers/NAME.json``, then the rankers
shipped with the package (``program/compiled/rankers/NAME.json``). The runtime replaces the name by the
numbers before anything is built, so saved programs, result files and arena folders record the ranker
itself, not a name that a refit could change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from program.errors import ConfigError, StorageError
from program.serving.shipped import COMPILED_DIR
from program.systems.modes import DATASET_RANKER

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
