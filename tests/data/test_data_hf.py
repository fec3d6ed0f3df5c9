"""HotpotQA in the Hugging Face column layout: saved to disk, or as Dataset objects (offline)."""

from __future__ import annotations

import pytest

datasets = pytest.importorskip("datasets")

from data.errors import DatasetError  # noqa: E402
from data.loaders import load_examples, load_hotpotqa_hf  # noqa: E402


@pytest.fixture
def hf_dataset(rows, to_hf_columns):
    return datasets.Dataset.from_dict(to_hf_columns(rows["hotpot"]))


def test_saved_dataset_loads_by_path(hf_dataset, tmp_path):
    hf_dataset.save_to_disk(str(tmp_path / "hotpot_hf"))
    examples = load_examples(tmp_path / "hotpot_hf", "validation")
    assert [ex.id for ex in examples] == ["h1", "h2", "h3"]
    h1 = examples[0]
    assert h1.dataset == "hotpotqa" and h1.type == "bridge"
    assert h1.gold_titles == ["Alpha", "Beta"] and h1.gold_sentences == [("Alpha", 0), ("Beta", 1), ("Alpha", 1)]
    assert examples[1].type is None


def test_saved_dataset_dict_picks_split_and_dev_means_validation(hf_dataset, tmp_path):
    dd = datasets.DatasetDict({"train": hf_dataset.select([0]), "validation": hf_dataset})
    dd.save_to_disk(str(tmp_path / "dd"))
    examples, report = load_hotpotqa_hf("dev", source=tmp_path / "dd")
    assert len(examples) == 3 and report.loaded == 3 and report.format == "hotpotqa-hf"
    assert len(load_examples(tmp_path / "dd", "train")) == 1
    with pytest.raises(DatasetError, match="available splits: train, validation"):
        load_examples(tmp_path / "dd", "test")


def test_dataset_object(hf_dataset):
    examples, _ = load_hotpotqa_hf("validation", source=hf_dataset)
    assert [ex.answer for ex in examples] == ["Beta", "yes", "no"]


def test_saved_dataset_in_data_dir_layout(hf_dataset, tmp_path):
    hf_dataset.save_to_disk(str(tmp_path / "hotpotqa" / "dev"))
    assert len(load_examples("hotpotqa", "dev", tmp_path)) == 3


def test_hub_failure_says_what_to_do(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DatasetError) as err:
        load_hotpotqa_hf("dev")
    message = str(err.value)
    assert "hotpotqa/hotpot_qa" in message and "'validation'" in message and "save_to_disk" in message
