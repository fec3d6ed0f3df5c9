"""LLM-as-judge: the swapped 0/2/4 ratings normalise to {0, .25, .5, .75, 1}; faithfulness is the supported share."""

from __future__ import annotations

import itertools

import dspy
import pytest
from doubles import GarbageLM, ScriptedLM, assign

from optimize.llm_judge import Judge, JudgeConfig, judged_row, normalize_ratings, parse_rating
from program.types import Passage

EX = dspy.Example(id="q1", question="Who directed Pulp Fiction?", answer="Quentin Tarantino").with_inputs("question")


def pred(answer="Tarantino", passages=(Passage("p1", "Pulp Fiction", "Directed by Quentin Tarantino."),)):
    return dspy.Prediction(answer=answer, passages=list(passages))


def test_normalization_takes_exactly_five_values():
    values = {normalize_ratings([a, b]) for a, b in itertools.product((0, 2, 4), repeat=2)}
    assert values == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert normalize_ratings([4, None]) == 1.0 and normalize_ratings([None, 3]) is None


@pytest.mark.parametrize(
    "raw,expected",
    [(4, 4), ("2", 2), ("4/4", 4), ("Rating: 0", 0), ("3", None), ("great", None), (None, None), (4.0, 4)],
)
def test_parse_rating(raw, expected):
    assert parse_rating(raw) == expected


def judge_with(lms):
    judge = Judge()
    assign(judge, lms)
    return judge


def test_answer_accuracy_rates_twice_with_roles_swapped():
    rater = ScriptedLM("judge", [{"rating": 4}, {"rating": 2}])
    judge = judge_with(
        {
            "accuracy": rater,
            "faithfulness": ScriptedLM(
                "judge", [{"claims": ["Tarantino directed Pulp Fiction."]}, {"supported": True}]
            ),
        }
    )
    out = judge(example=EX, prediction=pred())
    assert out["judge_ratings"] == [4, 2] and out["judge_accuracy"] == 0.75
    first, second = (h["messages"][-1]["content"] for h in rater.history[-2:])
    assert "reference ## ]]\nQuentin Tarantino\n" in first and "response ## ]]\nTarantino\n" in first
    assert "reference ## ]]\nTarantino\n" in second and "response ## ]]\nQuentin Tarantino" in second
    assert out["judge_faithfulness"] == 1.0 and out["judge_lm_calls"] == 4 and out["judge_problems"] == []


def test_faithfulness_is_the_share_of_supported_claims_bounded_by_max_claims():
    claims = {"claims": ["c1", "c2", "c3", "c4"]}
    faith = ScriptedLM("judge", [claims, {"supported": True}, {"supported": False}, {"supported": True}])
    judge = Judge(JudgeConfig(accuracy=False, max_claims=3))
    assign(judge, {"accuracy": GarbageLM("judge"), "faithfulness": faith})
    out = judge(example=EX, prediction=pred())
    assert out["judge_claims"] == ["c1", "c2", "c3"] and out["judge_faithfulness"] == pytest.approx(2 / 3)
    assert "judge_accuracy" not in out and faith.calls == 4


def test_not_applicable_without_passages_or_for_an_abstention():
    judge = Judge(JudgeConfig(accuracy=False))
    assign(judge, {"accuracy": GarbageLM("judge"), "faithfulness": GarbageLM("judge")})
    assert judge(example=EX, prediction=pred(passages=()))["judge_faithfulness"] is None
    assert judge(example=EX, prediction=pred(answer="unknown"))["judge_faithfulness"] is None


def test_garbage_judge_gives_none_and_records_problems():
    judge = judge_with({"accuracy": GarbageLM("judge"), "faithfulness": GarbageLM("judge")})
    out = judge(example=EX, prediction=pred())
    assert out["judge_accuracy"] is None and out["judge_faithfulness"] is None
    assert len(out["judge_problems"]) == 3  # two ratings, the claims


def test_judged_row_adds_the_fields():
    judge = judge_with(
        {
            "accuracy": ScriptedLM("judge", [{"rating": 0}, {"rating": 0}]),
            "faithfulness": ScriptedLM("judge", [{"claims": ["x"]}, {"supported": False}]),
        }
    )
    row = judged_row(lambda ex, p: {"id": ex.id}, judge)(EX, pred())
    assert row["id"] == "q1" and row["judge_accuracy"] == 0.0 and row["judge_faithfulness"] == 0.0


def test_judge_predictors_run_on_the_judge_role():
    from program.lm.roles import role_of

    judge = Judge()
    assert {role_of(n, judge) for n, _ in judge.named_predictors()} == {"judge"}
