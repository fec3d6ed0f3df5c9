"""experiments/lab/studies/bridge_misses.py: how a wrong bridge answer is sorted against gold."""

from __future__ import annotations

import pytest

from experiments.lab.studies.bridge_misses import KINDS, kind_of, summary


@pytest.mark.parametrize(
    ("question", "answer", "golds", "kind"),
    [
        ("Where was the father of X born?", "Boston", ["Boston"], "right"),
        ("Where was the father of X born?", "the Boston", ["Boston"], "right"),  # EM's normalisation
        ("Where was the father of X born?", "Sharon, Vermont", ["Sharon"], "kept too much"),
        ("Where was the director of film Y born?", "Saginaw", ["Saginaw, Michigan"], "cut too much"),
        (
            "Who is the paternal grandmother of Z?",
            "Lady Margaret Montgomerie",
            ["Margaret Montgomerie"],
            "one inside the other",
        ),  # fmt: skip
        ("Where did X's father die?", "London", ["Tower of London"], "one inside the other"),
        ("What nationality is the performer of song S?", "French", ["France"], "nationality word"),
        ("Which country the director of film F is from?", "United States", ["US"], "nationality word"),
        ("Who is the mother of W?", "unknown", ["Ragnild Magnusdotter"], "no answer"),
        ("Who is the mother of W?", "Lovisa of Sweden", ["Ragnild Magnusdotter"], "another fact"),
        ("Where was V born?", "Salerno", ["Italian", "Salerno"], "right"),  # an alias counts
        ("Where was V born?", "Bostonian", ["Boston"], "another fact"),  # a prefix of a word is not a word
    ],
)
def test_a_wrong_answer_is_sorted_by_how_it_differs_from_gold(question, answer, golds, kind):
    assert kind_of(question, answer, golds) == kind


def test_the_summary_counts_every_kind_and_the_select_step_both_ways():
    rows = [
        {"question": "q1", "gold": "A", "answer": "A", "kind": "right", "chain_done": True, "kept": "draft",
         "last_relation": "father", "chain_right": False},
        {"question": "q2", "gold": "B", "answer": "C", "kind": "another fact", "chain_done": True, "kept": "draft",
         "last_relation": "father", "chain_right": True},
        {"question": "q3", "gold": "D", "answer": "E", "kind": "another fact", "chain_done": True, "kept": "chain",
         "last_relation": None, "chain_right": False},
    ]  # fmt: skip
    out = summary(rows, examples=1)
    assert out["bridges"] == 3 and list(out["kinds"]) == list(KINDS)
    assert out["kinds"]["right"] == 1 and out["kinds"]["another fact"] == 2 and out["kinds"]["no answer"] == 0
    assert out["chain done, another round kept: the chain's last hop right, the kept answer wrong"] == 1
    assert out["chain done, another round kept: the kept answer right, the chain's last hop wrong"] == 1
    assert out["by the last hop's relation (rule plans)"] == {"father": {"right": 1, "another fact": 1}}
    assert out["examples"]["another fact"] == ["q2 | gold 'B' | answered 'C'"]  # at most one a kind
