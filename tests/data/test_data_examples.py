"""The example shape."""

from __future__ import annotations

import dspy

from data.examples import EXAMPLE_FIELDS, make_example


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
