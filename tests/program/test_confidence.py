"""Confidence from token logprobs: P(choice) in both adapter layouts, the answer tokens' confidence, and what gives None."""

from __future__ import annotations

import math

import pytest

from program.reading.confidence import choice_probabilities

VERDICTS = ("sufficient", "insufficient", "contradictory")


def tok(text, lp=-0.01, top=()):
    return {"token": text, "logprob": lp, "top_logprobs": [{"token": t, "logprob": a} for t, a in top]}


def lp(p):
    return math.log(p)


# the 1.5B critic's real first tokens (seen on a Palme d'Or question): '{"' 'ver' 'dict' '":' ' "' 'ins' ...
JSON_REPLY = [
    tok('{"'),
    tok("ver"),
    tok("dict"),
    tok('":'),
    tok(' "'),
    tok("ins", lp(0.5), [("ins", lp(0.5)), ("s", lp(0.3)), ("contr", lp(0.1)), ("conf", lp(0.05)), ("In", lp(0.05))]),
    tok("ufficient"),
    tok('",'),
    tok(' "confidence": 0.0}'),
]


def test_json_layout_renormalises_over_the_choices():
    probs = choice_probabilities({"content": JSON_REPLY}, "verdict", VERDICTS)
    # 'conf' is no prefix of a choice; 'In' is a case variant of a prefix of 'insufficient'
    total = 0.5 + 0.3 + 0.1 + 0.05
    assert probs == pytest.approx(
        {"sufficient": 0.3 / total, "insufficient": 0.55 / total, "contradictory": 0.1 / total}
    )


def test_a_token_that_starts_before_the_value_is_matched_after_its_shared_lead():
    reply = [
        tok('{"verdict":'),
        tok(' "s', lp(0.7), [(' "s', lp(0.7)), (' "ins', lp(0.2)), (" 'x", lp(0.1))]),
        tok('ufficient"}'),
    ]
    probs = choice_probabilities({"content": reply}, "verdict", VERDICTS)
    assert probs["sufficient"] == pytest.approx(0.7 / 0.9)
    assert probs["insufficient"] == pytest.approx(0.2 / 0.9)


def test_chat_adapter_layout():
    reply = [
        tok("[[ ## verdict ## ]]\n"),
        tok("sufficient", lp(0.6), [("sufficient", lp(0.6)), ("ins", lp(0.4))]),
        tok("\n\n[[ ## confidence ## ]]\n0.9"),
    ]
    probs = choice_probabilities({"content": reply}, "verdict", VERDICTS)
    assert probs["sufficient"] == pytest.approx(0.6) and probs["contradictory"] == 0.0


def test_choices_sharing_a_first_token_split_its_mass():
    reply = [tok('{"route": "'), tok("s", lp(0.8), [("s", lp(0.8)), ("m", lp(0.2))]), tok('ingle"}')]
    probs = choice_probabilities({"content": reply}, "route", ("single", "simple", "multi"))
    assert probs == pytest.approx({"single": 0.4, "simple": 0.4, "multi": 0.2})


@pytest.mark.parametrize(
    "logprobs",
    [
        None,
        {},
        {"content": []},
        {"content": [tok('{"answer": "Paris"}')]},  # no such field
        {"content": [tok('{"verdict": "')]},  # cut before the value
        {"content": [tok('{"verdict": "'), tok("maybe", -0.1, [("maybe", -0.1), ("perhaps", -2.0)])]},  # no choice
    ],
)
def test_unreadable_logprobs_give_none(logprobs):
    assert choice_probabilities(logprobs, "verdict", VERDICTS) is None


# ---- the generator's confidence in its answer --------------------------------------------------------------
def test_answer_confidence_reads_the_tokens_that_write_the_answer():
    from program.reading.confidence import answer_confidence, value_logprobs

    reply = [
        tok('{"answer": "', 0.0),
        tok("Quent", -0.1),
        tok("in Tar", -0.3),
        tok("antino", -0.2),
        tok('", "supporting_passages": [1]}', -0.01),
    ]
    conf = answer_confidence({"content": reply})
    assert conf == pytest.approx({"mean": -0.2, "min": -0.3, "first": math.exp(-0.1), "tokens": 3.0})
    escaped = [tok('{"answer": "'), tok('The \\"Red', -0.5), tok('\\" album', -0.7), tok('"}', -0.2)]
    assert value_logprobs({"content": escaped}, "answer") == [-0.5, -0.7]  # an escaped quote is not the end
    chat = [tok("[[ ## answer ## ]]\n"), tok("Amer", -0.4), tok("ican", -0.2), tok("\n\n[[ ## completed ## ]]")]
    assert value_logprobs({"content": chat}, "answer") == [-0.4, -0.2]


@pytest.mark.parametrize("logprobs", [None, {}, {"content": []}, {"content": [tok('{"verdict": "x"}')]}])
def test_no_answer_confidence_without_the_answers_tokens(logprobs):
    from program.reading.confidence import answer_confidence

    assert answer_confidence(logprobs) is None


def test_the_generator_step_says_why_it_has_no_answer_confidence():
    import dspy

    from program.reading.generation import record_confidence

    cases = [
        (None, "no parsed reply"),
        (dspy.Prediction(answer="a"), "no log-probabilities"),
        (dspy.Prediction(answer="a", logprobs={"content": []}), "no log-probabilities"),  # what DSPy gives then
        (dspy.Prediction(answer="a", logprobs={"content": [tok('{"verdict": "x"}')]}), "answer not found"),
    ]
    for pred, problem in cases:
        step: dict = {}
        record_confidence(step, pred)
        assert step == {"answer_confidence": None, "confidence_problem": problem}
    step = {}
    record_confidence(step, dspy.Prediction(answer="a", logprobs={"content": [tok('{"answer": "'), tok("a", -0.25)]}))
    assert step == {
        "answer_confidence": {"mean": -0.25, "min": -0.25, "first": 0.7788, "tokens": 1.0},
        "answer_top": None,
    }
