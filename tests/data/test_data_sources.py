"""One resolution of --dataset (data/sources.py): benchmark names, dataset folders, question files."""

from __future__ import annotations

import json

import pytest

from data.errors import DatasetError
from data.loaders import load_examples
from data.sources import DatasetSource, resolve_dataset


def test_benchmark_name_any_case_reads_the_data_dir_only_when_needed(data_dir):
    asked = []

    def find():
        asked.append(1)
        return data_dir

    source = resolve_dataset("HotpotQA", find)
    assert (source.kind, source.name, source.benchmark) == ("benchmark", "hotpotqa", "hotpotqa")
    assert asked == []  # naming the index needs no data folder
    assert source.split_file("dev") == data_dir / "hotpotqa" / "dev.json" and asked == [1]
    assert source.ref().spec == "hotpotqa" and source.ref().data_dir is None
    explicit = resolve_dataset("hotpotqa", data_dir).ref()
    assert explicit.data_dir == str(data_dir.resolve())


def test_folder_and_file(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "dev.jsonl").write_text(json.dumps({"id": "q1", "question": "Q?", "answer": "A"}) + "\n")
    (folder / "corpus.jsonl").write_text(json.dumps({"id": "p1", "title": "T", "text": "x"}) + "\n")
    monkeypatch.chdir(tmp_path)
    source = resolve_dataset("mine")  # relative: found from the working folder, named absolutely
    assert (source.kind, source.name, source.path) == ("folder", "mine", folder)
    assert source.split_file("dev") == folder / "dev.jsonl" and [p.id for p in source.corpus()] == ["p1"]
    assert source.ref().spec == str(folder)
    assert [ex.id for ex in load_examples("mine", "dev")] == ["q1"]
    file = resolve_dataset(folder / "dev.jsonl")
    assert (file.kind, file.name, file.split_file("train")) == ("file", "dev", folder / "dev.jsonl")
    corpus = resolve_dataset(folder / "corpus.jsonl")
    assert [p.id for p in corpus.corpus()] == ["p1"]


def test_errors_name_what_to_do(tmp_path):
    with pytest.raises(DatasetError, match=r"unknown dataset 'dev'; valid names: hotpotqa.*path to a dataset folder"):
        resolve_dataset("dev")
    with pytest.raises(DatasetError, match="no such file or folder.*--data-dir"):
        resolve_dataset(str(tmp_path / "missing.json"))
    with pytest.raises(DatasetError, match="no corpus file.*corpus.jsonl"):
        resolve_dataset(tmp_path).corpus()
    with pytest.raises(DatasetError, match="--data-dir"):
        resolve_dataset("musique", None).split_file("dev")


def test_a_source_passes_through(tmp_path):
    source = DatasetSource("x", "folder", "x", tmp_path)
    assert resolve_dataset(source) is source
