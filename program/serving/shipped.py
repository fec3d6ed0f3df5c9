"""The compiled programs that ship with the package, and which one a command uses by default.

``program/compiled/`` holds saved programs (program/serving/saved.py: JSON state, config, retriever settings, no
pickle) and ``MANIFEST.json``, one entry per program: what it was compiled on (dataset, corpus sha256,
question ids, the model), with which commands, and its measured figures. A command that runs SHARP without
``--program`` uses the shipped program whose corpus is the index's and whose model is the one asked for;
where none fits (another corpus, another model), it runs the ranked plain read (:data:`RANKED_READ`: SHARP's
draft alone) and says so in one line, never another corpus's program.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from program.errors import ProgramFileError

COMPILED_DIR = Path(__file__).resolve().parents[1] / "compiled"
MANIFEST = "MANIFEST.json"
# what ``--program`` takes to mean "the shipped default" and "no compiled program"
DEFAULT, NONE = "default", "none"
# what SHARP runs for a corpus (and model) without a shipped program, never another corpus's: the ranked plain
# read, the draft alone (its settings over the uncompiled config)
RANKED_READ = {"max_repairs": 0}


@dataclass(frozen=True)
class Shipped:
    """One shipped program: its file and its manifest entry."""

    name: str
    path: Path
    entry: dict

    @property
    def corpus_sha256(self) -> str | None:
        return self.entry.get("corpus_sha256")

    @property
    def lm(self) -> str | None:
        return self.entry.get("lm")

    def describe(self) -> str:
        e = self.entry
        return (
            f"the shipped compiled program {self.name!r} ({e.get('system', 'sharp')}, compiled on "
            f"{e.get('compiled_on', '?')} with {e.get('lm', '?')})"
        )


def read_manifest(folder: Path | None = None) -> dict[str, dict]:
    """name -> entry, as ``MANIFEST.json`` in ``folder`` (default: the package's) lists them."""
    path = (folder or COMPILED_DIR) / MANIFEST
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProgramFileError(f"{path} is not readable ({exc}); restore it from the repository") from None
    programs = data.get("programs") if isinstance(data, dict) else None
    if not isinstance(programs, dict):
        raise ProgramFileError(f"{path} has no 'programs' mapping; restore it from the repository")
    return programs


def shipped_programs(folder: Path | None = None) -> list[Shipped]:
    """Every shipped program, each file checked to exist and to hash as its entry records."""
    folder = folder or COMPILED_DIR
    out = []
    for name, entry in read_manifest(folder).items():
        path = folder / str(entry.get("file", ""))
        if not path.is_file():
            raise ProgramFileError(f"the shipped program {name!r} names {path}, which is missing")
        if entry.get("sha256") != file_sha256(path):
            raise ProgramFileError(
                f"the shipped program {path} does not match its entry in {folder / MANIFEST} (checksum "
                "differs): restore it from the repository or recompile it"
            )
        out.append(Shipped(name, path, dict(entry)))
    return out


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def default_program(corpus_sha256: str | None, lm: str | None, folder: Path | None = None) -> Shipped | None:
    """The shipped program compiled on this corpus for this model, or None."""
    if not corpus_sha256:
        return None
    for shipped in shipped_programs(folder):
        if shipped.corpus_sha256 == corpus_sha256 and (lm is None or shipped.lm == lm):
            return shipped
    return None


def manifest_entry(saved_path: Path, body: Mapping[str, Any]) -> dict:
    """A manifest entry for a program file (``body``: what it was compiled on, commands, figures)."""
    return {**dict(body), "file": saved_path.name, "sha256": file_sha256(saved_path)}
