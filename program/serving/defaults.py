"""Where things are when nobody says: the default corpus, the workspace and the folders in it.

One home for the `sharp` commands (experiments/settings.py reads these) and for :func:`program.load`, so a
program loaded from Python finds the index `sharp index` built and `sharp ask` reads. The default model is
:data:`program.lm.specs.DEFAULT_MODEL` (an :class:`~program.lm.LMConfig` left empty), the default program of
a corpus its shipped one (:mod:`program.serving.shipped`). Nothing here creates a folder: a command that writes
creates the workspace (experiments/settings.py), a program that only reads does not.
"""

from __future__ import annotations

import os
from pathlib import Path

# the checkout (or the folder holding the installed packages): ./workspace and ./datasets are looked up here
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# the corpus a command works on without --dataset, and the one whose shipped program `load()` gives
DEFAULT_DATASET = "hotpotqa"
WORKSPACE_ENV = "SHARP_WORKSPACE"


def workspace(explicit: str | os.PathLike | None = None) -> Path:
    """Everything the project generates: ``explicit`` (--workspace), else $SHARP_WORKSPACE, else ./workspace."""
    return Path(explicit or os.environ.get(WORKSPACE_ENV) or PROJECT_ROOT / "workspace").expanduser()


def index_dir(name: str, ws: str | os.PathLike) -> Path:
    """The index of the dataset whose index folder is ``name`` (a benchmark's name): WORKSPACE/indexes/NAME."""
    return Path(ws) / "indexes" / name


def rerankers_dir(ws: str | os.PathLike) -> Path:
    """Where `sharp train-reranker` saves rerankers, each in a folder named after it."""
    return Path(ws) / "rerankers"
