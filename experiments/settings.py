"""Where data is read from and where generated things go. Resolved here, passed down explicitly."""

from __future__ import annotations

import os
from pathlib import Path

from experiments import logs
from program.errors import ConfigError, StorageError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def data_dir(explicit: str | Path | None = None) -> Path:
    """The datasets folder: --data-dir, else $SHARP_DATA, else ./datasets, else ../shared/datasets."""
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get("SHARP_DATA"):
        candidates.append(Path(os.environ["SHARP_DATA"]))
    else:
        candidates += [Path.cwd() / "datasets", PROJECT_ROOT / "datasets", PROJECT_ROOT.parent / "shared" / "datasets"]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    raise ConfigError(
        "no datasets folder found (tried: " + ", ".join(str(c) for c in candidates) + "). "
        "Pass --data-dir DIR or set SHARP_DATA=DIR (here: export SHARP_DATA=$PWD/../shared/datasets)."
    )


def workspace(explicit: str | Path | None = None) -> Path:
    """Everything the project generates: --workspace, else $SHARP_WORKSPACE, else ./workspace."""
    path = Path(explicit or os.environ.get("SHARP_WORKSPACE") or PROJECT_ROOT / "workspace")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the workspace {path}: {exc.strerror or exc}. Pass --workspace DIR (or set "
            "SHARP_WORKSPACE) to a folder you can write"
        ) from None
    path = path.resolve()
    logs.use_workspace(path)  # the CLI's log file lives here (experiments/logs.py; a no-op outside the CLI)
    return path


def index_dir(dataset: str, ws: Path | None = None) -> Path:
    return (ws or workspace()) / "indexes" / dataset


def rerankers_dir(ws: Path | None = None) -> Path:
    """Where `sharp train-reranker` saves rerankers, each in a folder named after it."""
    return (ws or workspace()) / "rerankers"
