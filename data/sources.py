"""One resolution of a dataset name or path, for every command (index, retrieve, eval, ask, ...).

A dataset is given as

* a benchmark name (``hotpotqa``, ``2wikimultihopqa``, ``musique``; any case): its files are in
  ``DATA_DIR/NAME/`` (questions ``SPLIT.json``, ``SPLIT.jsonl`` or a saved Hugging Face folder
  ``SPLIT``; passages ``corpus.jsonl``);
* a folder laid out the same way (``PATH/SPLIT.json`` ..., ``PATH/corpus.jsonl``);
* a question file (JSON array, JSON Lines, saved Hugging Face dataset), whatever the split; its
  corpus is its questions' paragraphs, or the file itself when it is named ``corpus.jsonl``.

Its index lives in ``WORKSPACE/indexes/<name>``: the benchmark name, the folder's name or the
file's stem. :meth:`DatasetSource.ref` says how to name it in a command line (an absolute path,
so a suggested command works from any folder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from data.corpus import CORPUS_FILE, corpus_from_file, load_corpus
from data.errors import DatasetError
from data.readers import DATA_DIR_HINT, is_hf_saved
from program.retrieval.factory import DatasetRef
from program.types import Passage

DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")

DataDir = Path | str | Callable[[], Path] | None


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset's questions and passages are, and what its index is called."""

    spec: str  # as given
    kind: Literal["benchmark", "folder", "file"]
    name: str  # the index folder name (and the label in run names)
    path: Path | None = None  # the folder or file; None for a benchmark (its folder is under the data dir)
    data_dir: DataDir = field(default=None, compare=False, repr=False)

    @property
    def benchmark(self) -> str | None:
        """The benchmark name, which picks the row parser; None for a folder or file."""
        return self.name if self.kind == "benchmark" else None

    def folder(self) -> Path:
        """The folder holding the split files and corpus.jsonl (not for a file dataset)."""
        if self.kind == "folder":
            return self.path
        if self.kind == "file":
            raise DatasetError(f"{self.path} is a file, not a dataset folder")
        data_dir = self.data_dir() if callable(self.data_dir) else self.data_dir
        if data_dir is None:
            raise DatasetError(f"no data folder given for dataset {self.name!r}; {DATA_DIR_HINT}")
        folder = Path(data_dir) / self.name
        if not folder.is_dir():
            raise DatasetError(f"{folder}: no such folder; {DATA_DIR_HINT}")
        return folder

    def split_file(self, split: str) -> Path:
        """The questions of ``split``: SPLIT.json, SPLIT.jsonl or a saved Hugging Face folder SPLIT
        (a file dataset: the file itself, whatever the split)."""
        if self.kind == "file":
            return self.path
        folder = self.folder()
        for candidate in (folder / f"{split}.json", folder / f"{split}.jsonl", folder / split):
            if candidate.is_file() or is_hf_saved(candidate):
                return candidate
        splits = sorted({p.stem for p in folder.glob("*.json*") if p.stem != "corpus"})
        raise DatasetError(
            f"{folder}: no split {split!r} ({split}.json or {split}.jsonl); available splits: {', '.join(splits) or 'none'}"
        )

    def corpus_file(self) -> Path:
        if self.kind == "file":
            return self.path
        path = self.folder() / CORPUS_FILE
        if not path.is_file():
            hint = (
                f"point --data-dir (or SHARP_DATA) at the datasets folder, which holds {self.name}/{CORPUS_FILE}"
                if self.kind == "benchmark"
                else f"a dataset folder holds {CORPUS_FILE} (one passage per line: id, title, text)"
            )
            raise DatasetError(f"{path}: no corpus file; {hint}")
        return path

    def corpus(self) -> list[Passage]:
        """The passages to index (deduplicated)."""
        path = self.corpus_file()
        if self.kind == "file" and path.name != CORPUS_FILE:
            return corpus_from_file(path)
        return load_corpus(path)

    def ref(self) -> DatasetRef:
        """How a command line names this dataset: the benchmark name (with --data-dir when one was
        given explicitly) or the absolute path."""
        if self.kind != "benchmark":
            return DatasetRef(str(self.path.resolve()), self.name)
        explicit = self.data_dir if isinstance(self.data_dir, (str, Path)) else None
        return DatasetRef(self.name, self.name, str(Path(explicit).resolve()) if explicit else None)


def resolve_dataset(dataset: str | Path | DatasetSource, data_dir: DataDir = None) -> DatasetSource:
    """The :class:`DatasetSource` for a benchmark name or a path; unknown names and missing paths are
    DatasetErrors. ``data_dir`` (a folder, or a function giving one) is only consulted for a
    benchmark name, and only when its files are read."""
    if isinstance(dataset, DatasetSource):
        return dataset
    text = str(dataset).strip()
    if not text:
        raise DatasetError(f"no dataset given; valid names: {', '.join(DATASETS)} (or a path to a folder or file)")
    if isinstance(dataset, str) and text.lower() in DATASETS:
        return DatasetSource(text, "benchmark", text.lower(), data_dir=data_dir)
    path = Path(text).expanduser()
    if path.is_dir() and not is_hf_saved(path):
        return DatasetSource(text, "folder", path.resolve().name, path.resolve())
    if path.exists():
        return DatasetSource(text, "file", path.stem, path.resolve())
    if isinstance(dataset, Path) or "/" in text or "\\" in text or text.endswith((".json", ".jsonl")):
        raise DatasetError(f"{path}: no such file or folder; {DATA_DIR_HINT}")
    raise DatasetError(
        f"unknown dataset {text!r}; valid names: {', '.join(DATASETS)} (or a path to a dataset folder or a question file)"
    )
