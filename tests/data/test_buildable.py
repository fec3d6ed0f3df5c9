"""What `sharp build` needs of a dataset, checked before any work: each problem an error that names what is
missing and how many questions are needed (data/buildable.py)."""

from __future__ import annotations

import json

import pytest
from build_world import rows, write_folder

from data.buildable import check_buildable
from data.errors import DatasetError
from data.sources import resolve_dataset


def check(folder):
    return check_buildable(resolve_dataset(folder), min_fit=10, min_heldout=5)


def test_a_folder_of_ones_own_builds_with_or_without_supporting_paragraphs(tmp_path):
    found = check(write_folder(tmp_path / "mine"))
    assert (found.questions, found.labelled, found.dev) == (24, 24, True)
    bare = write_folder(tmp_path / "bare", labels=False)
    (bare / "dev.json").unlink()
    found = check(bare)
    assert (found.questions, found.labelled, found.dev) == (24, 0, False)


@pytest.mark.parametrize("missing", ["train.json", "corpus.jsonl"])
def test_a_folder_without_train_or_corpus_names_the_file_and_what_it_holds(tmp_path, missing):
    folder = write_folder(tmp_path / "mine")
    (folder / missing).unlink()
    with pytest.raises(DatasetError) as info:
        check(folder)
    message = str(info.value)
    assert f"has no {missing}" in message and "at least 15 questions with their answers" in message


def test_a_train_file_without_answers_says_so(tmp_path):
    folder = write_folder(tmp_path / "mine")
    (folder / "train.json").write_text(json.dumps([{"id": r["id"], "question": r["question"]} for r in rows()]))
    with pytest.raises(DatasetError, match=r"none of its 24 questions has an answer .* at least 15 of them"):
        check(folder)
    some = rows()
    for r in some[:3]:
        del r["answer"]
    (folder / "train.json").write_text(json.dumps(some))
    with pytest.raises(DatasetError, match=r"3 of its 24 questions have no answer \(rows 1, 2, 3\)"):
        check(folder)


def test_too_few_questions_to_hold_any_out_say_how_many_are_needed(tmp_path):
    folder = write_folder(tmp_path / "mine", n=12)
    with pytest.raises(DatasetError) as info:
        check(folder)
    assert "12 train questions with answers, too few to hold any out" in str(info.value)
    assert "needs at least 15, 10 to fit the gate and tune the policy on and 5 held out" in str(info.value)
