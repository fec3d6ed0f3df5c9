"""Loading questions from every supported layout, by name or by path."""

from __future__ import annotations

import logging

import pytest

from data.errors import DatasetError
from data.loaders import DATASETS, examples_from_rows, load_examples, load_examples_report


def by_id(examples):
    return {ex.id: ex for ex in examples}


def test_hotpotqa_official_by_name(data_dir):
    examples = load_examples("hotpotqa", "dev", data_dir)
    assert [ex.id for ex in examples] == ["h1", "h2", "h3"]
    h1, h2 = examples[0], examples[1]
    assert h1.dataset == "hotpotqa" and h1.type == "bridge" and h1.level == "hard"
    assert h1.gold_titles == ["Alpha", "Beta"]
    assert h1.gold_sentences == [("Alpha", 0), ("Beta", 1), ("Alpha", 1)]
    assert h1.answer_aliases == []
    assert h2.type is None and h2.gold_sentences == [("Alpha", None), ("Gamma", None)]
    assert h1.inputs().keys() == ["question"]


def test_jsonl_split_is_found(data_dir):
    assert [ex.id for ex in load_examples("hotpotqa", "train", data_dir)] == ["h1", "h2"]


def test_2wiki_official_and_open_retrieval(data_dir):
    train = by_id(load_examples("2wikimultihopqa", "train", data_dir))
    assert train["w1"].type == "compositional" and train["w1"].level is None
    assert train["w1"].gold_titles == ["Kim", "Lee"] and train["w1"].gold_sentences == [("Kim", 2), ("Lee", 1)]
    dev = by_id(load_examples("2wikimultihopqa", "dev", data_dir))
    assert dev["o1"].answer_aliases == ["Detroit, Michigan", "Motor City"]
    assert dev["o1"].gold_sentences == [("Aretha", None), ("Song", None)]
    assert dev["o1"].type is None and dev["o1"].dataset == "2wikimultihopqa"


def test_musique_types_gold_order_and_unanswerable(data_dir):
    examples, report = load_examples_report("musique", "dev", data_dir)
    got = by_id(examples)
    assert set(got) == {"2hop__1_2", "3hop1__1_2_3"}
    assert report.unanswerable == 1 and report.loaded == 2 and report.skipped == 0
    assert got["2hop__1_2"].type == "2hop" and got["3hop1__1_2_3"].type == "3hop"
    assert got["2hop__1_2"].gold_titles == ["First", "Second"]  # hop order, not paragraph order
    assert got["2hop__1_2"].gold_sentences == [] and got["2hop__1_2"].answer_aliases == ["A2"]


@pytest.mark.parametrize(
    "layout, name, dataset",
    [
        ("hotpot", "h.json", "hotpotqa"),
        ("twowiki", "w.jsonl", "2wikimultihopqa"),
        ("open", "o.json", "2wikimultihopqa"),
        ("musique", "m.jsonl", "musique"),
    ],
)
def test_path_autodetects_layout(rows, write_json, layout, name, dataset):
    path = write_json(rows[layout], name)
    examples, report = load_examples_report(path, "ignored")
    assert examples and all(ex.dataset == dataset for ex in examples)
    assert report.source == str(path)
    assert load_examples(str(path), "dev")[0].toDict() == examples[0].toDict()


def test_generic_question_answer_file(write_json):
    path = write_json([{"id": 7, "question": "q?", "answer": "a"}], "mine.jsonl")
    (ex,) = load_examples(path, "dev")
    assert ex.id == "7" and ex.dataset == "custom" and ex.gold_titles == []


def test_missing_id_gets_a_stable_id(write_json):
    path = write_json([{"question": "q?", "answer": "a"}], "noid.json")
    first, second = load_examples(path, "x"), load_examples(path, "x")
    assert first[0].id == second[0].id and first[0].id.startswith("q")


def test_limit_seed_balanced_are_passed_to_sampling(data_dir):
    everything = load_examples("hotpotqa", "dev", data_dir)
    two = load_examples("hotpotqa", "dev", data_dir, limit=2, seed=3)
    assert len(two) == 2 and two == load_examples("hotpotqa", "dev", data_dir, limit=2, seed=3)
    balanced = load_examples("hotpotqa", "dev", data_dir, limit=3, balanced=True)
    assert {ex.type for ex in balanced} == {ex.type for ex in everything}


def test_dataset_name_is_case_insensitive(data_dir):
    assert len(load_examples("HotpotQA", "dev", data_dir)) == 3


def test_unknown_dataset_lists_valid_names(data_dir):
    with pytest.raises(DatasetError) as err:
        load_examples("squad", "dev", data_dir)
    for name in DATASETS:
        assert name in str(err.value)


def test_duplicate_ids_are_logged(rows, caplog):
    row = rows["hotpot"][0]
    with caplog.at_level(logging.WARNING, logger="data.loaders"):
        examples, _ = examples_from_rows([("row 1", row), ("row 2", row)], "mem")
    assert len(examples) == 2 and "occur more than once" in caplog.text


def test_report_is_logged(data_dir, caplog):
    with caplog.at_level(logging.INFO, logger="data.loaders"):
        load_examples("musique", "dev", data_dir)
    assert "loaded 2 examples" in caplog.text and "answerable=false" in caplog.text
