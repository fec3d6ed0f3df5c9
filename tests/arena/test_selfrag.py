"""Self-RAG: each branch (no retrieval, rewrite when nothing is relevant, regenerate, abstain), bounded."""

from __future__ import annotations

import pytest
from doubles import GarbageLM, KeywordRetriever, ScriptedLM, assign

from program.errors import ConfigError
from program.systems.selfrag import SelfRAG, SelfRAGConfig

Q = "What nationality is the director of Pulp Fiction?"


def rel(*flags):
    return [{"relevant": f} for f in flags]


def run(
    config=None,
    decide="retrieve",
    grades=(),
    rewrites=(),
    answers=("American",),
    regen=(),
    support=("fully",),
    closed=("Paris",),
    garbage=(),
):
    retriever = KeywordRetriever()
    prog = SelfRAG(retriever, config or SelfRAGConfig(k=2))
    lms = {
        "decider": ScriptedLM("critic", [{"decision": decide}]),
        "grader": ScriptedLM("critic", list(grades)),
        "rewriter": ScriptedLM("planner", [{"query": q} for q in rewrites]),
        "generator": ScriptedLM("generator", [{"answer": a, "supporting_passages": [1]} for a in answers]),
        "regenerator": ScriptedLM("generator", [{"answer": a, "supporting_passages": [1]} for a in regen]),
        "checker": ScriptedLM("critic", [{"support": s} for s in support]),
        "closed_book": ScriptedLM("generator", [{"answer": a} for a in closed]),
    }
    for name in garbage:
        lms[name] = GarbageLM(name)
    assign(prog, lms)
    return prog(question=Q), lms, retriever


def steps(pred, role):
    return [s for s in pred.trace if s["role"] == role]


def test_no_retrieval_decision_answers_closed_book():
    pred, lms, retriever = run(decide="no_retrieval")
    assert pred.answer == "Paris" and pred.stop_reason == "no_retrieval"
    assert retriever.queries == [] and pred.passages == []
    assert steps(pred, "retrieval_decider")[0]["decision"] == "no_retrieval"
    assert lms["generator"].calls == 0 and lms["closed_book"].calls == 1


def test_relevant_passages_are_kept_and_a_supported_answer_returned():
    pred, lms, retriever = run(grades=rel(True, False))
    assert pred.stop_reason == "supported" and pred.answer == "American"
    assert len(pred.passages) == 1 and retriever.queries == [(Q, 2)]
    assert [s["relevant"] for s in steps(pred, "relevance_grader")] == [True, False]
    assert lms["rewriter"].calls == 0 and pred.retries == 0


def test_all_irrelevant_rewrites_the_query_and_retrieves_again():
    pred, lms, retriever = run(grades=rel(False, False, True, False), rewrites=["Quentin Tarantino nationality"])
    assert [q for q, _ in retriever.queries] == [Q, "Quentin Tarantino nationality"]
    assert pred.retries == 1 and pred.queries == [Q, "Quentin Tarantino nationality"]
    assert steps(pred, "query_rewriter")[0]["action"] == "retry"
    second_round = steps(pred, "retriever")[1]["retrieved_ids"][0]
    assert [p.id for p in pred.passages] == second_round[:1]


def test_rewrites_are_bounded_then_the_retrieved_set_is_used():
    cfg = SelfRAGConfig(k=2, max_rewrites=2)
    pred, lms, retriever = run(cfg, grades=rel(*[False] * 10), rewrites=["Tarantino", "Quentin Tarantino director"])
    assert len(retriever.queries) == 3 and lms["rewriter"].calls == 2 and lms["grader"].calls == 6
    assert any("no passage graded relevant" in s.get("note", "") for s in steps(pred, "self_rag"))
    assert len(pred.passages) == 2  # the last retrieved set


def test_a_repeated_rewrite_stops_the_loop():
    pred, lms, retriever = run(SelfRAGConfig(k=2, max_rewrites=3), grades=rel(*[False] * 10), rewrites=[Q.upper()])
    assert len(retriever.queries) == 1 and steps(pred, "query_rewriter")[0]["action"] == "stop"


def test_unsupported_answer_is_regenerated_then_accepted():
    pred, lms, _ = run(grades=rel(True, True), support=("no", "fully"), regen=["Quentin Tarantino is American"])
    assert pred.stop_reason == "supported_after_regeneration"
    assert pred.answer == "Quentin Tarantino is American"
    assert lms["generator"].calls == 1 and lms["regenerator"].calls == 1 and lms["checker"].calls == 2


def test_still_unsupported_abstains_within_max_generations():
    cfg = SelfRAGConfig(k=2, max_generations=3)
    pred, lms, _ = run(cfg, grades=rel(True, True), support=("no", "no", "partially"), regen=["French", "Polish"])
    assert pred.stop_reason == "supported_after_regeneration" and pred.answer == "Polish"
    pred, lms, _ = run(
        SelfRAGConfig(k=2, max_generations=2, accept_partial=False),
        grades=rel(True, True),
        support=("no", "partially", "fully"),
        regen=["French"],
    )
    assert pred.answer == "unknown" and pred.stop_reason == "unsupported_abstain" and pred.cited_ids == []
    assert lms["checker"].calls == 2 and lms["regenerator"].calls == 1
    assert steps(pred, "self_rag")[-1]["rejected_answers"] == ["American", "French"]


def test_unsupported_can_be_kept_instead_of_abstaining():
    cfg = SelfRAGConfig(k=2, max_generations=1, on_unsupported="keep")
    pred, lms, _ = run(cfg, grades=rel(True, True), support=("no",))
    assert pred.answer == "American" and pred.stop_reason == "unsupported_kept" and lms["regenerator"].calls == 0


def test_garbage_graders_fall_back_to_permissive_defaults_and_are_recorded():
    pred, lms, retriever = run(garbage=("decider", "grader", "checker", "rewriter"))
    assert pred.answer == "American" and pred.stop_reason == "supported"
    decider = steps(pred, "retrieval_decider")[0]
    assert decider["decision"] == "retrieve" and decider["problem"] == "unparseable"
    assert all(s["relevant"] is True and s["problem"] for s in steps(pred, "relevance_grader"))
    assert steps(pred, "support_checker")[0]["support"] == "fully"
    assert pred.cost["lm_calls"] <= SelfRAGConfig().budget.max_lm_calls * 2


def test_budget_bounds_the_graders():
    cfg = SelfRAGConfig(k=5, budget={"max_lm_calls": 3})
    pred, lms, _ = run(cfg, grades=rel(*[True] * 5))
    skipped = [s for s in steps(pred, "relevance_grader") if (s["problem"] or "").startswith("skipped")]
    assert skipped and lms["grader"].calls == 2 and pred.answer == "American"


def test_config_is_validated():
    with pytest.raises(ConfigError, match="max_generations"):
        SelfRAGConfig.from_mapping({"max_generations": 0})
    with pytest.raises(ConfigError, match="unknown key 'retries'"):
        SelfRAGConfig.from_mapping({"retries": 1})
