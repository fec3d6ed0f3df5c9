"""Whether a dataset holds what `sharp build` needs, said before any work: train questions with answers, enough
of them to fit on and hold some out, and a corpus; supporting-paragraph labels are optional.

A folder of one's own builds like a bundled corpus: ``train.json`` (or ``train.jsonl``: questions with
answers, in any layout data/formats.py reads, at least ``{"question": ..., "answer": ...}``), ``corpus.jsonl``
(one passage a line: id, title, text) and optionally ``dev.json``. Each problem is a DatasetError that names
what is missing and how many are needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from data.corpus import CORPUS_FILE
from data.errors import DatasetError
from data.readers import read_rows
from data.sources import DatasetSource

TRAIN = "train"


@dataclass(frozen=True)
class Buildable:
    """What a dataset offers a build: its train questions with answers, how many carry supporting-paragraph
    labels (gold titles), and whether it has a dev split."""

    questions: int
    labelled: int
    dev: bool


def _answered(row: Any) -> bool:
    if not isinstance(row, Mapping) or row.get("answerable") is False:
        return False
    answer = row.get("answer")
    return isinstance(answer, str) and bool(answer.strip())


def _kept(row: Any) -> bool:
    """A row the loaders keep as a question (MuSiQue's unanswerable ones are left out on purpose)."""
    return not (isinstance(row, Mapping) and row.get("answerable") is False)


def check_buildable(source: DatasetSource, min_fit: int, min_heldout: int) -> Buildable:
    """The train questions of ``source`` checked for a build that fits on at least ``min_fit`` of them and holds
    out at least ``min_heldout``: a DatasetError naming the missing file, the questions without an answer, or
    how many more questions are needed."""
    needed = min_fit + min_heldout
    if source.kind == "folder":
        missing = [name for name, ok in _files(source).items() if not ok]
        if missing:
            raise DatasetError(
                f"{source.path} has no {' and no '.join(missing)}: `sharp build` needs train.json (at least {needed} "
                f"questions with their answers) and {CORPUS_FILE} (the passages, one a line: id, title, text) in the "
                "folder; dev.json is optional"
            )
    path = source.split_file(TRAIN)
    rows = [row for _, row in read_rows(path)]
    answered = [row for row in rows if _answered(row)]
    if rows and not answered:
        raise DatasetError(
            f"{path}: none of its {len(rows)} questions has an answer (an 'answer' field with text): `sharp build` "
            f"fits on train questions with their answers, at least {needed} of them"
        )
    unanswered = [i for i, row in enumerate(rows, 1) if not _answered(row) and _kept(row)]
    if unanswered:
        raise DatasetError(
            f"{path}: {len(unanswered)} of its {len(rows)} questions have no answer (rows "
            f"{', '.join(map(str, unanswered[:5]))}{', ...' if len(unanswered) > 5 else ''}): give each train "
            "question its answer (an 'answer' field with text), or leave those questions out"
        )
    if len(answered) < needed:
        raise DatasetError(
            f"{path}: {len(answered)} train questions with answers, too few to hold any out: `sharp build` needs at "
            f"least {needed}, {min_fit} to fit the gate and tune the policy on and {min_heldout} held out to check them"
        )
    from data.loaders import load_examples

    examples = load_examples(source, TRAIN, skip_malformed=True)
    labelled = sum(bool(ex.get("gold_titles")) for ex in examples)
    return Buildable(len(examples), labelled, _has_dev(source))


def _files(source: DatasetSource) -> dict[str, bool]:
    folder = source.folder()
    train = any((folder / f"{TRAIN}{ext}").is_file() for ext in (".json", ".jsonl")) or (folder / TRAIN).is_dir()
    return {"train.json": train, CORPUS_FILE: (folder / CORPUS_FILE).is_file()}


def _has_dev(source: DatasetSource) -> bool:
    try:
        source.split_file("dev")
    except DatasetError:
        return False
    return True
