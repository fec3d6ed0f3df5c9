"""The example shape and its JSON round-trip."""

from __future__ import annotations

import json

import dspy
import pytest

from data.errors import DatasetError
from data.examples import EXAMPLE_FIELDS, example_from_dict, example_to_dict, make_example


def build() -> dspy.Example:
    return make_example(
        id="q1",
        question=" Who? ",
        answer="Ann ",
        dataset="hotpotqa",
        answer_aliases=["Ann", "Annie", "Annie", ""],
        type="bridge",
        level="hard",
        gold_titles=["B", "A", "B"],
        gold_sentences=[("B", 0), ["A", None]],
    )


def test_make_example_fields_and_inputs():
    ex = build()
    assert set(ex.keys()) == set(EXAMPLE_FIELDS)
    assert ex.inputs().toDict() == {"question": "Who?"}
    assert ex.answer == "Ann" and ex.answer_aliases == ["Annie"]
    assert ex.gold_titles == ["B", "A"]
    assert ex.gold_sentences == [("B", 0), ("A", None)]


def test_json_round_trip():
    ex = build()
    text = json.dumps(example_to_dict(ex))
    back = example_from_dict(json.loads(text))
    assert back.toDict() == ex.toDict()
    assert back.inputs().keys() == ["question"]


def test_round_trip_of_minimal_dict():
    back = example_from_dict({"id": "x", "question": "q?", "answer": "a", "dataset": "custom", "type": None})
    assert back.type is None and back.gold_titles == [] and back.gold_sentences == []


@pytest.mark.parametrize(
    "bad, word",
    [
        ({"id": "x", "question": "q", "answer": "a"}, "dataset"),
        ({"id": "x", "question": "q", "answer": "a", "dataset": "d", "foo": 1}, "foo"),
    ],
)
def test_from_dict_rejects_bad_keys(bad, word):
    with pytest.raises(DatasetError, match=word):
        example_from_dict(bad)
