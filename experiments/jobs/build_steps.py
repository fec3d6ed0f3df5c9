"""The steps of `sharp build`: each skipped when its output is up to date for the same inputs, each a nested
MLflow run of the build's run.

A step that writes a file leaves beside it (or where :class:`Stamp` is told) a small JSON *stamp*: the digest of
everything the output was made from (the programs it started from, by checksum; the questions, by id; the
recorded rounds of those questions, by digest; the settings) and the checksum of the output it wrote. The step
is up to date when the output is there, unchanged since (its checksum), and the stamp's digest is the digest of
the inputs now; else it runs again, from scratch (a tuning study it left half done is started anew, so a killed
build resumes to the same program).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import tracking
from program.digest import digest

log = logging.getLogger(__name__)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True)
class Stamp:
    """The stamp of ``output``: at ``where`` (default: beside it, ``NAME.inputs.json``)."""

    output: Path
    where: Path | None = None

    @property
    def path(self) -> Path:
        return self.where or self.output.with_name(f"{self.output.stem}.inputs.json")

    def current(self, inputs: Mapping[str, Any]) -> bool:
        """Whether ``output`` is there, unchanged, and was made from ``inputs``."""
        if not self.output.is_file() or not self.path.is_file():
            return False
        try:
            stamp = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return False
        return stamp.get("digest") == digest(dict(inputs)) and stamp.get("output_sha256") == file_sha256(self.output)

    def write(self, inputs: Mapping[str, Any], **extra: Any) -> None:
        body = {"digest": digest(dict(inputs)), "output_sha256": file_sha256(self.output), **extra, "inputs": inputs}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(body, indent=1, sort_keys=True, default=str) + "\n")

    def extra(self, key: str) -> Any:
        """A value the step kept in its stamp (e.g. the MLflow run that made the output)."""
        try:
            return json.loads(self.path.read_text()).get(key)
        except (OSError, ValueError):
            return None


@dataclass
class StepLog:
    """What one step did: ran, or skipped (and why), in how many seconds."""

    name: str
    ran: bool
    note: str
    seconds: float = 0.0


class Steps:
    """Runs a build's steps in order, each in a nested MLflow run (the build's run must be active), saying on
    the console what each does or why it is skipped."""

    def __init__(self, build: str, names: tuple[str, ...], say: Callable[[str], None]):
        self.build, self.names, self.say = build, names, say
        self.done: list[StepLog] = []

    def run(self, name: str, work: Callable[[], str | None], skip: str | None = None) -> StepLog:
        """Step ``name``: skipped with the reason ``skip`` where given, else ``work()`` (it returns the line that
        says what it made)."""
        n = self.names.index(name) + 1
        head = f"[{n}/{len(self.names)}] {name}"
        tags = {"kind": "build-step", "build": self.build, "step": name, "skipped": str(skip is not None).lower()}
        t0 = time.perf_counter()
        with tracking.run(f"{self.build}: {name}", tags=tags):
            if skip is not None:
                self.say(f"{head}: {skip}")
                tracking.log_params({"note": skip})
                entry = StepLog(name, False, skip)
            else:
                self.say(f"{head} ...")
                note = work() or "done"
                self.say(f"{head}: {note}")
                tracking.log_params({"note": note})
                entry = StepLog(name, True, note, time.perf_counter() - t0)
        self.done.append(entry)
        return entry
