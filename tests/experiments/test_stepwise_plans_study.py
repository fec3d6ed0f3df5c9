"""The step-by-step planning study's checks and demos (experiments/lab/studies/stepwise_plans.py); its reads are
the chain's own (tests/program/test_chain.py)."""

from __future__ import annotations

from types import SimpleNamespace

from experiments.lab.studies.stepwise_plans import demos, first_hop_problem, rewrite_problem, summary

Q = "What is the name of the waterfall in the country where the Bubye River is found?"


def test_a_first_hop_is_one_short_question_about_a_named_entity():
    assert first_hop_problem("Which country is the Bubye River in?", Q) is None
    assert first_hop_problem(Q, Q) == "the question again"
    assert first_hop_problem(Q + " Please.", Q) == "the question again"  # not shorter than the question
    assert first_hop_problem("What is the waterfall in #1?", Q) == "names an earlier answer"
    assert first_hop_problem("  ", Q) == "empty"


def test_a_rewrite_writes_the_answer_in_and_asks_less():
    assert rewrite_problem("What is the name of the waterfall in Zimbabwe?", Q, "Zimbabwe") is None
    assert rewrite_problem(Q, Q, "Zimbabwe") == "the question unchanged"
    assert rewrite_problem("What is the name of the waterfall?", Q, "Zimbabwe") == "the answer not written in"


def ex(i, hops, question="q"):
    return SimpleNamespace(id=f"e{i}", question=f"{question}{i}", gold_hops=hops)


def test_demos_come_from_gold_decompositions_never_a_scored_question():
    two = [("Bubye River >> country", "Zimbabwe"), ("what is the name of the waterfall in #1", "Victoria Falls")]
    three = [("Brother >> performer", "Brother Ali"), ("What city was #1 formed in?", "x"), ("snow in #2", "y")]
    pool = [ex(0, two), ex(1, three), ex(2, two), ex(3, [("one hop only", "a")]), ex(4, two)]
    first, rewrite = demos(pool, skip={"e2"}, k=2)
    assert [d.question for d in first] == ["q0", "q1"]  # a scored question (e2) is never a demo
    assert first[0].hop == "Which country is Bubye River in?"
    assert [d.question for d in rewrite] == ["q0", "q4"]  # two-hop decompositions only
    assert rewrite[0].rewritten == "What is the name of the waterfall in Zimbabwe" and rewrite[0].answer == "Zimbabwe"


def test_the_summary_counts_each_step_over_every_bridge():
    rows = [
        {"hop1_problem": "the question again"},
        {"hop1_problem": None, "answer1": "Zimbabwe", "hop1_em": 1.0, "rewritten": "r", "rewrite_problem": None,
         "answer": "Victoria Falls", "em": 1.0},
        {"hop1_problem": None, "answer1": "Utah", "hop1_em": 0.0, "rewritten": "q", "rewrite_problem": "the question unchanged"},
    ]  # fmt: skip
    s = summary(rows)
    assert s["hop 1 a single question"] == 0.6667 and s["hop 1 = gold intermediate answer"] == 0.3333
    assert s["rewrite valid"] == 0.3333 and s["EM"] == 0.3333
    assert s["hop 1 problems"] == {"the question again": 1} and s["rewrite problems"] == {"the question unchanged": 1}
