"""Where data is read from and where generated things go. Resolved here, passed down explicitly."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from experiments.console import logs
from program.errors import ConfigError, StorageError
from program.serving import defaults
from program.serving.defaults import PROJECT_ROOT


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
    """Everything the project generates (:func:`program.serving.defaults.workspace`: --workspace, else $SHARP_WORKSPACE,
    else ./workspace), created here."""
    path = defaults.workspace(explicit)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the workspace {path}: {exc.strerror or exc}. Pass --workspace DIR (or set "
            "SHARP_WORKSPACE) to a folder you can write"
        ) from None
    path = path.resolve()
    logs.use_workspace(path)  # the CLI's log file lives here (experiments/console/logs.py; a no-op outside the CLI)
    return path


def index_dir(dataset: str, ws: Path | None = None) -> Path:
    return defaults.index_dir(dataset, ws or workspace())


def rerankers_dir(ws: Path | None = None) -> Path:
    """Where `sharp train-reranker` saves rerankers, each in a folder named after it."""
    return defaults.rerankers_dir(ws or workspace())


def portable(value: Any, ws: str | Path | None = None, root: str | Path = PROJECT_ROOT) -> Any:
    """``value`` as a file meant to be committed may carry it: every absolute path inside the checkout
    ``root``, alone or within text (a command line, a note), relative to it (``workspace/indexes/hotpotqa``,
    ``.`` for the checkout itself), and one inside a workspace ``ws`` outside the checkout as
    ``WORKSPACE/...``; other text is left as it is. A path, a string, or lists and dicts of them (JSON);
    other values are returned unchanged. So a report names no folder of the machine that wrote it."""
    root = Path(root).resolve()
    # (folder, what the folder itself becomes, what a path below it starts with)
    names = [(root, ".", "")]
    if ws is not None and not Path(ws).resolve().is_relative_to(root):
        names.insert(0, (Path(ws).resolve(), "WORKSPACE", "WORKSPACE/"))
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        for path, itself, below in names:
            # the folder itself, or a path below it; never a longer name (/work/main is no prefix of /work/main2)
            pattern = re.escape(str(path)) + r"(?:/|(?![\w.-]))"
            value = re.sub(pattern, lambda m, i=itself, b=below: b if m.group().endswith("/") else i, value)
        return value
    if isinstance(value, dict):
        return {k: portable(v, ws, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v, ws, root) for v in value]
    return value
