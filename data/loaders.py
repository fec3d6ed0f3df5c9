"""Question loaders: the bundled benchmarks by name, any supported file, saved Hugging Face datasets."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from data.errors import DatasetError
from data.examples import make_example
from data.formats import RowFormat, detect_format
from data.readers import (
    BadRow,
    is_hf_saved,
    read_rows,
)
from data.sampling import sample
from data.sources import DATASETS as DATASETS  # re-exported
from data.sources import DatasetSource, resolve_dataset

logger = logging.getLogger(__name__)

MAX_LOGGED_PROBLEMS = 5


@dataclass
class LoadReport:
    """What one load did: how many rows became examples, and why the others did not."""

    source: str
    format: str = "unknown"
    loaded: int = 0
    skipped: int = 0
    unanswerable: int = 0
    problems: list[str] = field(default_factory=list)

    def log(self) -> None:
        logger.info("%s: loaded %d examples (%s format)", self.source, self.loaded, self.format)
        if self.unanswerable:
            logger.info("%s: left out %d questions marked answerable=false", self.source, self.unanswerable)
        if self.skipped:
            logger.warning(
                "%s: skipped %d malformed rows, e.g.:\n  %s",
                self.source,
                self.skipped,
                "\n  ".join(self.problems[:MAX_LOGGED_PROBLEMS]),
            )


def _parse_row(row: Any, fmt: RowFormat | None, dataset: str | None) -> tuple[RowFormat, dspy.Example | None]:
    """(format, example) for one raw row; example is None for an unanswerable MuSiQue row."""
    if isinstance(row, BadRow):
        raise row
    if not isinstance(row, Mapping):
        raise DatasetError(f"expected a JSON object, got {type(row).__name__}")
    fmt = fmt or detect_format(row)
    if row.get("answerable") is False:
        return fmt, None
    return fmt, make_example(**fmt.parse(row, dataset or fmt.dataset))


def _where(source: str, location: str, row: Any) -> str:
    qid = row.get("_id", row.get("id")) if isinstance(row, Mapping) else None
    return f"{source}: {location}" + (f" (id {qid})" if qid is not None else "")


def examples_from_rows(
    rows: Iterable[tuple[str, Any]], source: str, dataset: str | None = None, skip_malformed: bool = False
) -> tuple[list[dspy.Example], LoadReport]:
    """Examples from ``(location, row)`` pairs; the layout is detected from the first good row.

    A malformed row raises a DatasetError naming source, row and field, unless
    ``skip_malformed``, which counts and reports it instead.
    """
    report, fmt, examples = LoadReport(source), None, []
    for location, row in rows:
        try:
            fmt, example = _parse_row(row, fmt, dataset)
        except DatasetError as exc:
            message = f"{_where(source, location, row)}: {exc}"
            if not skip_malformed:
                raise DatasetError(message) from None
            report.skipped += 1
            report.problems.append(message)
            continue
        if example is None:
            report.unanswerable += 1
        else:
            examples.append(example)
    report.format, report.loaded = fmt.name if fmt else "unknown", len(examples)
    _check_loaded(examples, report)
    return examples, report


def _check_loaded(examples: list[dspy.Example], report: LoadReport) -> None:
    if not examples:
        first = f"; first problem: {report.problems[0]}" if report.problems else ""
        raise DatasetError(f"{report.source}: no usable questions ({report.skipped} rows skipped){first}")
    repeated = [qid for qid, n in Counter(ex.id for ex in examples).items() if n > 1]
    if repeated:
        logger.warning("%s: %d question ids occur more than once, e.g. %s", report.source, len(repeated), repeated[0])


def resolve_source(
    dataset: str | Path | DatasetSource, split: str, data_dir: str | Path | None
) -> tuple[Path, str | None]:
    """(file, benchmark name or None) for a dataset name, folder or file (data/sources.py); unknown
    names are errors."""
    source = resolve_dataset(dataset, data_dir)
    return source.split_file(split), source.benchmark


def load_examples_report(
    dataset: str | Path | DatasetSource,
    split: str,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    seed: int = 0,
    balanced: bool = False,
    skip_malformed: bool = False,
) -> tuple[list[dspy.Example], LoadReport]:
    """Questions of a benchmark split as examples, optionally a seeded (balanced) sample, and the
    :class:`LoadReport` of the load (counts before sampling).

    ``dataset``: 'hotpotqa', '2wikimultihopqa', 'musique' (read from ``data_dir/NAME/SPLIT.json``),
    a folder holding ``SPLIT.json``, or a path to a JSON / JSONL file or saved Hugging Face dataset
    (layout auto-detected; ``split`` then only picks a split of a saved DatasetDict). See
    data/sources.py.
    """
    path, name = resolve_source(dataset, split, data_dir)
    split_hint = split if is_hf_saved(path) else None
    examples, report = examples_from_rows(read_rows(path, split_hint), str(path), name, skip_malformed)
    report.log()
    return sample(examples, limit, seed, balanced), report


def load_examples(dataset: str | Path | DatasetSource, split: str, *args: Any, **kwargs: Any) -> list[dspy.Example]:
    """The examples of :func:`load_examples_report` (the same arguments), without the report."""
    return load_examples_report(dataset, split, *args, **kwargs)[0]
