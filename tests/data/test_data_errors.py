"""Every failure names the file, the row or line, and the field, and says what to do."""

from __future__ import annotations

import logging

import pytest

from data.errors import DatasetError
from data.loaders import load_examples, load_examples_report
from program.errors import SharpError


def message_of(*args, **kwargs) -> str:
    with pytest.raises(DatasetError) as err:
        load_examples(*args, **kwargs)
    return str(err.value)


def test_dataset_error_is_a_sharp_value_error():
    assert issubclass(DatasetError, SharpError) and issubclass(DatasetError, ValueError)


def test_missing_file_names_path_and_data_dir(tmp_path):
    message = message_of(tmp_path / "nope.json", "dev")
    assert str(tmp_path / "nope.json") in message and "--data-dir" in message and "SHARP_DATA" in message


def test_missing_dataset_folder(tmp_path):
    message = message_of("musique", "dev", tmp_path)
    assert str(tmp_path / "musique") in message and "SHARP_DATA" in message


def test_no_data_dir_for_a_named_dataset():
    assert "--data-dir" in message_of("hotpotqa", "dev", None)


def test_unknown_split_lists_available(data_dir):
    message = message_of("hotpotqa", "test", data_dir)
    assert "'test'" in message and "available splits: dev, train" in message


def test_unreadable_file(write_json, tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'[{"question": "caf\xe9"}]')
    assert str(path) in message_of(path, "dev") and "UTF-8" in message_of(path, "dev")


def test_folder_that_is_not_a_dataset(tmp_path):
    # a folder is read as a dataset folder (SPLIT.json, corpus.jsonl): one without the split says so
    (tmp_path / "train.json").write_text("[]")
    message = message_of(tmp_path, "dev")
    assert str(tmp_path) in message and "no split 'dev'" in message and "available splits: train" in message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("  \n")
    assert "empty" in message_of(path, "dev")


def test_malformed_json_array_names_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n{"question": "q", "answer": "a"},\n{"question": "q2" "answer": "b"}\n]\n')
    message = message_of(path, "dev")
    assert str(path) in message and "line 3" in message and "column" in message


def test_malformed_jsonl_line_names_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n{"question": \n')
    message = message_of(path, "dev")
    assert str(path) in message and "line 2" in message and "invalid JSON" in message


@pytest.mark.parametrize(
    "change, field, problem",
    [
        ({"question": None}, "question", "missing"),
        ({"answer": None}, "answer", "missing"),
        ({"answer": 42}, "answer", "must be a string, got int"),
        ({"question": "   "}, "question", "empty"),
        ({"type": 3}, "type", "string or null"),
        ({"answer_aliases": "x"}, "answer_aliases", "list of strings"),
        ({"supporting_facts": [["A"]]}, "supporting_facts", "[title, sent_id]"),
        ({"supporting_facts": [["A", "zero"]]}, "supporting_facts", "bad sentence id"),
    ],
)
def test_bad_row_names_file_row_and_field(rows, write_json, change, field, problem):
    bad = {k: v for k, v in {**rows["hotpot"][1], **change}.items() if v is not None or k == "type"}
    path = write_json([rows["hotpot"][0], bad], "bad.json")
    message = message_of(path, "dev")
    assert str(path) in message and "row 2" in message and "(id h2)" in message
    assert f"field '{field}'" in message and problem in message


def test_bad_musique_row(rows, write_json):
    bad = {**rows["musique"][0], "paragraphs": "not a list"}
    message = message_of(write_json([rows["musique"][1], bad], "m.jsonl"), "dev")
    assert "line 2" in message and "field 'paragraphs'" in message


def test_row_that_is_not_an_object(rows, write_json):
    message = message_of(write_json([rows["hotpot"][0], ["a", "list"]], "x.json"), "dev")
    assert "row 2" in message and "expected a JSON object, got list" in message


def test_unrecognised_layout(write_json):
    message = message_of(write_json([{"query": "q", "label": "a"}], "x.json"), "dev")
    assert "unrecognised row layout" in message and "query" in message and "row 1" in message


def test_skip_malformed_counts_and_logs(rows, write_json, tmp_path, caplog):
    path = tmp_path / "mixed.jsonl"
    good = write_json(rows["hotpot"], "good.jsonl").read_text().splitlines()
    path.write_text("\n".join([good[0], "{broken", '{"_id": "z", "question": "q"}', good[1], "[1]"]) + "\n")
    with caplog.at_level(logging.WARNING, logger="data.loaders"):
        examples, report = load_examples_report(path, "dev", skip_malformed=True)
    assert [ex.id for ex in examples] == ["h1", "h2"]
    assert (report.loaded, report.skipped) == (2, 3) and len(report.problems) == 3
    assert "line 2" in report.problems[0] and "field 'answer'" in report.problems[1]
    assert "skipped 3 malformed rows" in caplog.text and "line 3" in caplog.text


def test_skip_malformed_with_a_bad_first_row_detects_from_the_next(rows, write_json):
    path = write_json([{"_id": "bad"}] + rows["musique"][:1], "m.json")
    examples, report = load_examples_report(path, "dev", skip_malformed=True)
    assert examples[0].dataset == "musique" and report.skipped == 1


def test_nothing_usable_is_an_error_even_when_skipping(write_json):
    path = write_json([{"question": "q"}, {"question": "r"}], "x.json")
    with pytest.raises(DatasetError) as err:
        load_examples(path, "dev", skip_malformed=True)
    assert "no usable questions (2 rows skipped)" in str(err.value) and "row 1" in str(err.value)
