"""Adaptive-RAG routes (each recorded) and ReAct's step limit, finish and failure paths."""

from __future__ import annotations

import pytest
from doubles import GarbageLM, KeywordRetriever, ScriptedLM, assign

from program.systems.adaptive import AdaptiveConfig, AdaptiveRAG
from program.systems.react import ReActConfig, ReActRAG, search

Q = "What nationality is the director of Pulp Fiction?"


def adaptive(route, config=None, garbage_router=False):
    retriever = KeywordRetriever()
    prog = AdaptiveRAG(retriever, config or AdaptiveConfig())
    lms = {"router": GarbageLM("planner") if garbage_router else ScriptedLM("planner", [{"complexity": route}]),
           "closed_book": ScriptedLM("generator", [{"answer": "French"}]),
           "planner": ScriptedLM("planner", [{"sub_queries": ["Pulp Fiction director"]}]),
           "critic": ScriptedLM("critic", [{"verdict": "sufficient", "confidence": 0.9, "missing_information": [],
                                            "suggested_queries": []}]),
           "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}])}
    assign(prog, lms)
    return prog(question=Q), lms, retriever


def router_step(pred):
    return next(s for s in pred.trace if s["role"] == "router")


def test_route_no_retrieval_answers_closed_book():
    pred, lms, retriever = adaptive("no_retrieval")
    assert router_step(pred)["route"] == "no_retrieval" and pred.stop_reason == "route_no_retrieval"
    assert pred.answer == "French" and retriever.queries == [] and pred.system == "adaptive"


def test_route_single_step_retrieves_once():
    pred, lms, retriever = adaptive("single_step", AdaptiveConfig(single_k=4))
    assert router_step(pred)["route"] == "single_step" and retriever.queries == [(Q, 4)]
    assert lms["planner"].calls == 0 and lms["critic"].calls == 0 and pred.answer == "American"
    assert pred.cost["lm_calls"] == 2


def test_route_multi_step_runs_the_sharp_loop_and_accounts_everything():
    pred, lms, _ = adaptive("multi_step")
    assert router_step(pred)["route"] == "multi_step" and pred.trace[0]["role"] == "router"
    assert [lm.calls for k, lm in lms.items() if k in ("planner", "critic", "generator")] == [1, 1, 1]
    assert pred.stop_reason == "sufficient" and pred.cost["lm_calls"] == 4
    assert [s["step"] for s in pred.trace] == list(range(len(pred.trace)))


@pytest.mark.parametrize("default", ["multi_step", "single_step"])
def test_garbage_router_takes_the_default_route_and_records_it(default):
    pred, _, _ = adaptive(None, AdaptiveConfig(default_route=default), garbage_router=True)
    step = router_step(pred)
    assert step["route"] == default and step["problem"] == "unparseable"


def test_adaptive_predictors_keep_their_role_names():
    names = {n for n, _ in AdaptiveRAG(KeywordRetriever()).named_predictors()}
    assert names == {"planner", "critic", "generator", "router", "closed_book"}


# ---- ReAct --------------------------------------------------------------------------------
def react_step(query="Pulp Fiction director", tool="search"):
    return {"next_thought": "look it up", "next_tool_name": tool, "next_tool_args": {"query": query} if query else {}}


def react(agent_answers, config=None, fallback=("American",)):
    retriever = KeywordRetriever()
    prog = ReActRAG(retriever, config or ReActConfig(max_iters=3))
    agent = ScriptedLM("generator", agent_answers) if agent_answers is not None else GarbageLM("generator")
    gen = ScriptedLM("generator", [{"answer": a, "supporting_passages": [1]} for a in fallback])
    assign(prog, {"agent": agent, "generator": gen})
    return prog(question=Q), agent, gen, retriever


def test_react_stops_at_the_step_limit():
    pred, agent, gen, retriever = react([react_step()] * 3 + [{"reasoning": "r", "answer": "Quentin Tarantino"}])
    assert len(retriever.queries) == 3 and pred.stop_reason == "step_limit"
    assert agent.calls == 4 and gen.calls == 0  # 3 steps + extract
    assert pred.answer == "Quentin Tarantino" and {p.id for p in pred.passages} >= {"p1"}
    step = next(s for s in pred.trace if s["role"] == "agent")
    assert step["tool_calls"] == 3 and step["finished"] is False


def test_react_finishes_early():
    pred, agent, _, retriever = react([react_step(), react_step(None, "finish"), {"reasoning": "r", "answer": "American"}])
    assert pred.stop_reason == "finish" and len(retriever.queries) == 1 and pred.answer == "American"


def test_react_agent_garbage_falls_back_to_the_generator():
    pred, agent, gen, retriever = react(None)
    assert pred.stop_reason == "agent_failed" and pred.answer == "American" and gen.calls == 1
    assert retriever.queries == [(Q, 3)]  # nothing found by the agent: the question is searched once
    assert next(s for s in pred.trace if s["role"] == "agent")["error"]


def test_search_tool_outside_forward_is_an_error():
    with pytest.raises(RuntimeError, match="only inside"):
        search("x")
