"""Critic compilation: harvested critique states, gold-derived labels, the calibrated metric."""

from __future__ import annotations

import dspy
import pytest

from optimize.compile import compile_program
from optimize.critic import (
    CriticProgram,
    critic_feedback,
    critic_score,
    critic_student,
    critique_cases,
    evaluate_critic,
    harvest,
    install_critic,
    label_counts,
    read_verdict,
    split_cases,
)
from program.evidence import format_evidence
from program.types import Passage


def case(sufficient, gold=("A", "B"), seen=("A", "B")):
    return dspy.Example(sufficient=sufficient, gold_titles=list(gold), evidence_titles=list(seen))


def pred(verdict, confidence, missing=(), suggested=()):
    return dspy.Prediction(
        verdict=verdict, confidence=confidence, missing_information=list(missing), suggested_queries=list(suggested)
    )


def test_metric_rewards_right_and_calibrated_verdicts():
    assert critic_score(case(True), pred("sufficient", 1.0)) == pytest.approx(1.0)
    assert critic_score(case(True), pred("sufficient", 0.6)) == pytest.approx(0.5 + 0.5 * (1 - 0.16))
    assert critic_score(case(False), pred("insufficient", 0.9)) == pytest.approx(0.5 + 0.5 * (1 - 0.01))
    # wrong and confident is the worst; wrong but unsure is better
    assert critic_score(case(False), pred("sufficient", 1.0)) == pytest.approx(0.0)
    assert critic_score(case(False), pred("sufficient", 0.55)) == pytest.approx(0.5 * (1 - 0.3025))
    # "contradictory" counts as not sufficient; a percentage is read as a probability
    assert critic_score(case(False), pred("contradictory", 80)) == pytest.approx(0.5 + 0.5 * (1 - 0.04))


def test_unreadable_or_inconsistent_output_is_what_the_program_would_do():
    assert read_verdict(pred("maybe", 0.9)) == ("insufficient", 0.0)
    assert read_verdict(pred("sufficient", "high")) == ("insufficient", 0.0)
    assert read_verdict(pred("sufficient", 0.9, ["x"], ["find x"])) == ("insufficient", 0.0)
    assert read_verdict(None) == ("insufficient", 0.0)
    assert critic_score(case(True), None) == 0.0 and critic_score(case(False), pred("maybe", 0.9)) == 0.0
    assert "unusable" in critic_feedback(case(True), pred("maybe", 0.9)).feedback


def test_feedback_names_over_and_under_triggering():
    over = critic_feedback(case(True), pred("insufficient", 0.9))
    assert "Over-triggered" in over.feedback and over.score < 0.5
    under = critic_feedback(case(False, seen=("A",)), pred("sufficient", 0.9))
    assert "Under-triggered" in under.feedback and "'B'" in under.feedback
    right = critic_feedback(case(True), pred("sufficient", 0.95))
    assert "Right verdict" in right.feedback and right.score > 0.9


def test_cases_from_a_trace_rebuild_what_the_critic_saw():
    passages = {
        p.id: p for p in [Passage("a", "A", "alpha text"), Passage("b", "B", "beta text"), Passage("c", "C", "gamma")]
    }
    trace = [
        {"role": "planner"},
        {"role": "retriever", "queries": ["q", "sub 1"]},
        {
            "role": "critic",
            "round": 0,
            "verdict": "insufficient",
            "confidence": 0.8,
            "evidence_ids": ["a", "c"],
            "evidence_titles": ["A", "C"],
        },
        {"role": "retriever", "queries": ["find B"]},
        {
            "role": "critic",
            "round": 1,
            "verdict": "sufficient",
            "confidence": 0.9,
            "evidence_ids": ["a", "c", "b"],
            "evidence_titles": ["A", "C", "B"],
        },
        {"role": "critic", "round": 2, "verdict": None},  # a critique that never produced a verdict
        {"role": "generator"},
    ]
    ex = dspy.Example(id="x1", question="  What   is A? ", gold_titles=["A", "B"])
    cases = critique_cases(ex, dspy.Prediction(trace=trace), passages, passage_chars=600)
    assert [c.sufficient for c in cases] == [False, True]
    assert [c.verdict for c in cases] == ["insufficient", "sufficient"]  # labeled demos carry the right verdict
    assert cases[0].missing_information == ["the facts in the passage about B"]  # ...and the gold gap
    assert cases[0].suggested_queries == ["B"] and cases[1].suggested_queries == []
    assert all(0.5 < c.confidence < 1.0 for c in cases)
    assert cases[0].sub_queries == ["q", "sub 1"] and cases[1].sub_queries == ["q", "sub 1", "find B"]
    assert cases[1].evidence == format_evidence([passages["a"], passages["c"], passages["b"]], 600)
    assert cases[0].question == "What is A?" and cases[0].id == "x1#0"
    assert set(cases[0].inputs().keys()) == {"question", "sub_queries", "evidence"}
    assert (
        critique_cases(dspy.Example(id="y", question="q", gold_titles=[]), dspy.Prediction(trace=trace), passages, 600)
        == []
    )


def test_harvest_reproduces_the_critic_inputs_exactly(world):
    prog = world.program()
    cases = harvest(prog, world.examples())
    counts = label_counts(cases)
    assert counts["questions"] == 9 and counts["sufficient"] > 0 and counts["insufficient"] > 0
    # the rule critic answers from its inputs: on the harvested inputs it says what it said in the run
    critic = critic_student(prog)
    for c in cases:
        verdict, conf = read_verdict(critic(**c.inputs()))
        assert (verdict, conf) == (c.program_verdict, c.program_confidence)
    train, val = split_cases(cases, 0.3, seed=1)
    assert not {c.question_id for c in train} & {c.question_id for c in val}
    assert len(train) + len(val) == len(cases)


def test_compiled_critic_goes_back_into_the_program(world):
    prog = world.program()
    cases = harvest(prog, world.examples())
    student = critic_student(prog)
    before = evaluate_critic(student, cases)
    assert 0 < before["score"] < 1 and before["n_critiques"] == len(cases)
    # the overconfident cases are wrong: over/under-trigger statistics see them
    assert before["verdict_accuracy"] < 1.0
    res = compile_program(student, "bootstrap", cases, metric=critic_score, metric_threshold=0.75)
    assert isinstance(res.program, CriticProgram) and res.program.critic.demos
    assert res.cost["by_role"].keys() == {"critic"}
    planner_lm = prog.planner.lm
    install_critic(prog, res.program)
    assert prog.critic.dump_state()["demos"] == res.program.critic.dump_state()["demos"]
    assert prog.critic.lm.role == "critic" and prog.planner.lm is planner_lm
    assert prog(question=world.cases[0].question).answer == "American"


def labelled(i, verdict):
    return dspy.Example(
        id=f"q{i}#0",
        question=f"q{i}",
        sub_queries=[f"q{i}"],
        evidence="[1] A: a",
        verdict=verdict,
        confidence=0.9,
        missing_information=[] if verdict == "sufficient" else ["B"],
        suggested_queries=[] if verdict == "sufficient" else ["B"],
        sufficient=verdict == "sufficient",
        gold_titles=["A", "B"],
    ).with_inputs("question", "sub_queries", "evidence")


def test_balance_adds_the_missing_verdict_and_interleaves(world):
    from optimize.critic import balance_demos

    critic = critic_student(world.program())
    one_sided = [
        dspy.Example(question="d1", verdict="sufficient", confidence=0.9),
        dspy.Example(question="d2", verdict="sufficient", confidence=0.9),
    ]
    preds = [p for _, p in critic.named_predictors()]
    for p in preds:
        p.demos = list(one_sided)
    cases = [labelled(0, "sufficient"), labelled(1, "insufficient"), labelled(2, "insufficient")]
    assert balance_demos(critic, cases) == ["q1#0"]  # the first insufficient case, once per predictor
    demos = preds[0].demos
    assert [d.verdict for d in demos] == ["sufficient", "insufficient", "sufficient"]
    added = demos[1]
    assert added.question == "q1" and added.suggested_queries == ["B"] and "sufficient" not in added
    # already balanced, or no case of the missing label: nothing changes
    assert balance_demos(critic, cases) == []
    for p in preds:
        p.demos = list(one_sided)
    assert balance_demos(critic, [labelled(0, "sufficient")]) == [] and len(preds[0].demos) == 2


def test_critic_metric_scores_token_probabilities_when_the_prediction_carries_them():
    import math

    import dspy

    from optimize.critic import critic_score, read_p_sufficient

    def pred(p_suff, logprobs=True):
        tokens = [
            {"token": '{"verdict": "', "logprob": 0.0, "top_logprobs": []},
            {
                "token": "ins",
                "logprob": math.log(1 - p_suff),
                "top_logprobs": [
                    {"token": "ins", "logprob": math.log(1 - p_suff)},
                    {"token": "s", "logprob": math.log(p_suff)},
                ],
            },
        ]
        fields = dict(verdict="insufficient", confidence=0.0, missing_information=["x"], suggested_queries=["x"])
        return dspy.Prediction(**fields, **({"logprobs": {"content": tokens}} if logprobs else {}))

    complete = dspy.Example(sufficient=True)
    assert read_p_sufficient(pred(0.8)) == (pytest.approx(0.8), "token")
    # "insufficient, 0.0" in words is P(sufficient) = 1.0 verbally; 0.8 in tokens, and the call is right
    assert critic_score(complete, pred(0.8)) == pytest.approx(0.5 + 0.5 * (1 - 0.2**2))
    assert critic_score(complete, pred(0.3)) == pytest.approx(0.5 * (1 - 0.7**2))
    assert read_p_sufficient(pred(0.8, logprobs=False)) == (1.0, "verbal")
    # a critique SHARP discards (here: an invalid verdict) is unknown, whatever its logprobs say
    garbage = pred(0.8)
    garbage.verdict = "maybe"
    assert read_p_sufficient(garbage) == (0.5, "fallback") and critic_score(complete, garbage) == 0.0


def token_pred(p_suff, verdict="insufficient"):
    import math

    tokens = [
        {"token": '{"verdict": "', "logprob": 0.0, "top_logprobs": []},
        {
            "token": "ins",
            "logprob": math.log(1 - p_suff),
            "top_logprobs": [
                {"token": "ins", "logprob": math.log(1 - p_suff)},
                {"token": "s", "logprob": math.log(p_suff)},
            ],
        },
    ]
    return dspy.Prediction(
        verdict=verdict,
        confidence=0.0,
        missing_information=["x"],
        suggested_queries=["x"],
        logprobs={"content": tokens},
    )


def test_the_critic_is_scored_on_the_call_the_program_makes_at_its_threshold():
    from optimize.critic import CriticScore, read_critique_of
    from program.critique import critic_stops

    complete, incomplete = dspy.Example(sufficient=True), dspy.Example(sufficient=False)
    # P(sufficient) 0.4 in tokens, "insufficient" in words: SHARP at 0.35 stops, at 0.5 searches again
    crit = read_critique_of(token_pred(0.4))
    assert crit["confidence_source"] == "token"
    assert critic_stops(crit, 0.35) and not critic_stops(crit, 0.5)
    brier_part = 0.5 * (1 - 0.6**2)
    assert CriticScore(0.35)(complete, token_pred(0.4)) == pytest.approx(0.5 + brier_part)
    assert CriticScore(0.5)(complete, token_pred(0.4)) == pytest.approx(brier_part)
    assert CriticScore(0.35)(incomplete, token_pred(0.4)) == pytest.approx(0.5 * (1 - 0.4**2))
    assert "Under-triggered" in CriticScore(0.35).feedback(case(False, seen=("A",)), token_pred(0.4)).feedback
    assert "Over-triggered" in CriticScore(0.5).feedback(case(True), token_pred(0.4)).feedback


def test_evaluate_critic_reports_the_calls_at_the_given_threshold():
    class Fixed(dspy.Module):  # a critic whose P(sufficient) is 0.4 on every case
        def forward(self, **kwargs):
            return token_pred(0.4)

    critic = CriticProgram(Fixed())
    cases = [labelled(0, "sufficient"), labelled(1, "insufficient")]
    low, high = evaluate_critic(critic, cases, 0.35), evaluate_critic(critic, cases, 0.5)
    # at 0.35 it stops on both: right on the complete case, under-triggers on the incomplete one
    assert (low["verdict_accuracy"], low["over_trigger"], low["under_trigger"]) == (0.5, 0.0, 1.0)
    assert (high["verdict_accuracy"], high["over_trigger"], high["under_trigger"]) == (0.5, 1.0, 0.0)
    assert low["brier"] == high["brier"] == pytest.approx((0.6**2 + 0.4**2) / 2)
    assert low["insufficient_rate"] == 0.0 and high["insufficient_rate"] == 1.0


def test_the_program_and_the_critic_metric_discard_the_same_critiques():
    from program.critique import critique_problem

    assert critique_problem({}, parsed=False) == "unparseable"
    assert critique_problem({"verdict": "maybe", "confidence": 0.9}).startswith("invalid fields")
    assert critique_problem({"verdict": "sufficient", "confidence": "high"}).startswith("invalid fields")
    assert critique_problem(
        {"verdict": "sufficient", "confidence": 0.9, "missing_information": ["x"], "suggested_queries": ["find x"]}
    ).startswith("inconsistent")
    assert critique_problem({"verdict": "sufficient", "confidence": 0.9, "missing_information": ["x"]}) is None
    for fields in ({"verdict": "maybe", "confidence": 0.9}, {"verdict": "insufficient", "confidence": 0.7}):
        discarded = critique_problem(fields) is not None
        assert (critic_score(case(True), dspy.Prediction(**fields)) == 0.0) == discarded


def test_the_compiled_critic_is_called_exactly_as_the_program_calls_it():
    """Same messages, adapter and LM settings: the critic metric scores the prompts SHARP sends."""
    from doubles import KeywordRetriever, ScriptedLM, assign

    from program.sharp import SharpConfig, SharpRAG

    class Recording(ScriptedLM):
        requests: list = []  # shared: harvest runs a deep copy of the program

        def forward(self, prompt=None, messages=None, **kwargs):
            self.requests.append((messages, {k: kwargs.get(k) for k in ("max_tokens", "logprobs", "top_logprobs")}))
            return super().forward(prompt=prompt, messages=messages, **kwargs)

    reply = {"verdict": "sufficient", "confidence": 0.9, "missing_information": [], "suggested_queries": []}
    prog = SharpRAG(KeywordRetriever(), SharpConfig(critic_max_tokens=200))
    critic_lm = Recording("critic", [reply, reply])
    assign(
        prog,
        {
            "planner": ScriptedLM("planner", [{"sub_queries": ["Pulp Fiction director"]}]),
            "critic": critic_lm,
            "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        },
    )
    cases = harvest(
        prog,
        [
            dspy.Example(
                id="q", question="Who directed Pulp Fiction?", answer="Quentin Tarantino", gold_titles=["Pulp Fiction"]
            ).with_inputs("question")
        ],
    )
    assert len(cases) == 1 and len(critic_lm.requests) == 1
    student = critic_student(prog)
    assert student.adapter == "json"
    student(**cases[0].inputs())
    in_program, compiled = critic_lm.requests
    assert compiled == in_program  # the JSON adapter's messages, max_tokens 200, logprobs on
    from program.confidence import TOP_LOGPROBS

    assert in_program[1] == {"max_tokens": 200, "logprobs": True, "top_logprobs": TOP_LOGPROBS}
    assert "json" in str(in_program[0]).lower()
