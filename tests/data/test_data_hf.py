"""HotpotQA in the Hugging Face column layout, saved to disk (offline)."""

from __future__ import annotations

import pytest

datasets = pytest.importorskip("datasets")

from data.errors import DatasetError  # noqa: E402
from data.loaders import load_examples, load_examples_report  # noqa: E402


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
    examples, report = load_examples_report(tmp_path / "dd", "dev")
    assert len(examples) == 3 and report.loaded == 3 and report.format == "hotpotqa-hf"
    assert len(load_examples(tmp_path / "dd", "train")) == 1
    with pytest.raises(DatasetError, match="available splits: train, validation"):
        load_examples(tmp_path / "dd", "test")


def test_saved_dataset_in_data_dir_layout(hf_dataset, tmp_path):
    hf_dataset.save_to_disk(str(tmp_path / "hotpotqa" / "dev"))
    assert len(load_examples("hotpotqa", "dev", tmp_path)) == 3
