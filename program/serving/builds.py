"""Programs belong to a model and a corpus: what a built program is called, where `sharp build` leaves it, and
what to say where none fits.

`sharp build --dataset D --lm MODEL` builds ``sharp-D`` for the default model and ``sharp-D-SLUG`` for another
(SLUG: the model's name, ``qwen2.5-coder-0.5b``), saves it as ``WORKSPACE/programs/NAME.json`` and ships it
into program/compiled/ (program/serving/shipped.py). Each build notes in ``WORKSPACE/builds/measured.json``
the speed it measured for its model and the train questions of its corpus, so that the notice given where no
program fits (:func:`build_hint`) names the exact command and, where a speed was measured, its time.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from program.lm.specs import DEFAULT_MODEL
from program.serving.shipped import Shipped, shipped_programs

MEASURED = "measured.json"


def model_slug(model: str) -> str:
    """The model's name as a file name part: ``local/qwen2.5-coder-0.5b`` -> ``qwen2.5-coder-0.5b``."""
    name = model.split("/", 1)[-1]
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "model"


def program_name(dataset: str, model: str) -> str:
    """The name of the program built for ``dataset`` (its index folder's name) and ``model``."""
    return f"sharp-{dataset}" if model == DEFAULT_MODEL else f"sharp-{dataset}-{model_slug(model)}"


def built_path(ws: str | Path, dataset: str, model: str) -> Path:
    """Where `sharp build` leaves the program it built: WORKSPACE/programs/NAME.json."""
    return Path(ws) / "programs" / f"{program_name(dataset, model)}.json"


def built_program(ws: str | Path, dataset: str, model: str) -> Path | None:
    """The program built here for ``dataset`` and ``model``, if any."""
    path = built_path(ws, dataset, model)
    return path if path.is_file() else None


def for_corpus(corpus_sha256: str | None, models: Iterable[str], folder: Path | None = None) -> Shipped | None:
    """The shipped program compiled on this corpus for one of ``models``, or None."""
    wanted = set(models)
    return next((s for s in shipped_programs(folder) if corpus_sha256 and s.corpus_sha256 == corpus_sha256
                 and s.lm in wanted), None)  # fmt: skip


def build_command(dataset: str, model: str) -> str:
    """The `sharp build` command that builds a program for ``dataset`` (a name or a folder) and ``model``."""
    lm = "" if model == DEFAULT_MODEL else f" --lm {shlex.quote(model)}"
    return f"sharp build --dataset {shlex.quote(str(dataset))}{lm}"


def read_measured(ws: str | Path) -> dict[str, Any]:
    """What builds measured here: ``{"models": {MODEL: {"seconds_per_question": ...}}, "corpora": {NAME:
    {"train_questions": N}}}`` (empty where nothing was built)."""
    path = Path(ws) / "builds" / MEASURED
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def estimated_seconds(ws: str | Path, dataset: str, model: str, questions: int | None = None) -> float | None:
    """The recording time of a build of ``dataset`` with ``model`` at the speed a build measured for that model
    here (None: never measured, or the corpus's train questions unknown)."""
    measured = read_measured(ws)
    speed = (measured.get("models") or {}).get(model) or {}
    n = questions or ((measured.get("corpora") or {}).get(dataset) or {}).get("train_questions")
    seconds = speed.get("seconds_per_question")
    return float(seconds) * int(n) if seconds and n else None


def build_hint(dataset: str, model: str, ws: str | Path, questions: int | None = None, name: str | None = None) -> str:
    """The notice where no program fits ``dataset`` and ``model``: the exact command, and its time where a
    speed was measured for that model here."""
    seconds = estimated_seconds(ws, name or dataset, model, questions)
    if seconds is not None:
        when = f"about {_duration(seconds)} of model time at the speed measured for {model} here"
    else:
        when = "it measures the model on a few questions first and says how long the rest takes before recording it"
    what = f"{questions} train questions, " if questions else ""
    return f"build one for it with `{build_command(dataset, model)}` ({what}{when})"


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 3600:
        return f"{max(1, s // 60)} min"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"
