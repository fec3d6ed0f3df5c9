"""Raw rows from JSON arrays, JSON Lines files and Hugging Face datasets (saved or from the hub).

Every reader yields ``(location, row)`` pairs; ``location`` ("row 3", "line 12") is what error
messages quote. A JSON Lines line that does not parse is yielded as a :class:`BadRow` so that
the caller can skip it (``skip_malformed``) or raise it; a broken JSON array cannot be skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from data.errors import DatasetError

logger = logging.getLogger(__name__)

DATA_DIR_HINT = "point --data-dir (or SHARP_DATA) at the datasets folder, or pass an existing file"
HF_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
HF_SPLIT_NAMES = {"dev": "validation", "val": "validation", "validation": "dev"}


class BadRow(DatasetError):
    """A row that could not be decoded; carries its location."""


def is_hf_saved(path: Path) -> bool:
    """True for a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    return path.is_dir() and any((path / m).is_file() for m in HF_MARKERS)


def read_rows(path: str | Path, split: str | None = None) -> Iterator[tuple[str, Any]]:
    """Rows of a ``.json`` array, a JSON Lines file, or a saved Hugging Face dataset folder."""
    path = Path(path)
    if is_hf_saved(path):
        yield from hf_rows(load_hf_from_disk(path, split))
        return
    if not path.exists():
        raise DatasetError(f"{path}: no such file; {DATA_DIR_HINT}")
    if path.is_dir():
        raise DatasetError(f"{path}: is a folder, not a dataset file (nor a saved Hugging Face dataset)")
    try:
        with path.open(encoding="utf-8") as handle:
            first = _first_char(handle)
            if first == "":
                raise DatasetError(f"{path}: the file is empty")
            if first == "[":
                yield from _json_array(path, handle)
            else:
                yield from _json_lines(path, handle)
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the file ({exc.strerror or exc}); {DATA_DIR_HINT}") from None


def _first_char(handle) -> str:
    """The first non-space character; the handle is rewound."""
    while True:
        chunk = handle.read(4096)
        if not chunk or chunk.strip():
            handle.seek(0)
            return chunk.strip()[:1]


def _json_array(path: Path, handle) -> Iterator[tuple[str, Any]]:
    try:
        rows = json.load(handle)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    for number, row in enumerate(rows, start=1):
        yield f"row {number}", row


def _json_lines(path: Path, handle) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        location = f"line {number}"
        try:
            yield location, json.loads(line)
        except json.JSONDecodeError as exc:
            yield (
                location,
                BadRow(
                    f"invalid JSON ({exc.msg} at column {exc.colno}); "
                    "expected one JSON object a line (JSON Lines) or a JSON array"
                ),
            )


# ---------------------------------------------------------------- Hugging Face


def hf_rows(dataset: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """Rows of a ``datasets.Dataset`` (or any iterable of dicts)."""
    for number, row in enumerate(dataset, start=1):
        yield f"row {number}", row


def pick_split(dataset: Any, split: str | None, source: str) -> Any:
    """One split of a DatasetDict ('dev' also finds 'validation'); a Dataset is returned as is."""
    if not hasattr(dataset, "keys"):
        return dataset
    names = list(dataset.keys())
    for name in (split, HF_SPLIT_NAMES.get(split or "")):
        if name in names:
            return dataset[name]
    if split is None and len(names) == 1:
        return dataset[names[0]]
    raise DatasetError(f"{source}: no split {split!r}; available splits: {', '.join(names)}")


def load_hf_from_disk(path: Path, split: str | None = None) -> Any:
    """A dataset saved with ``save_to_disk`` (one split picked from a DatasetDict)."""
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise DatasetError(f"{path}: cannot load the saved Hugging Face dataset ({exc})") from None
    return pick_split(loaded, split, str(path))
