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
    lms = {
        "router": GarbageLM("planner") if garbage_router else ScriptedLM("planner", [{"complexity": route}]),
        "closed_book": ScriptedLM("generator", [{"answer": "French"}]),
        "planner": ScriptedLM("planner", []),
        "critic": ScriptedLM("critic", [{"verdict": "supported", "confidence": 0.9}]),
        "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        "composer": ScriptedLM("generator", []),
    }
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
    # the SHARP loop: the draft (no log-probabilities: P 0.5), which the critic reads and supports
    pred, lms, _ = adaptive("multi_step", AdaptiveConfig(ask_critic="band"))
    assert router_step(pred)["route"] == "multi_step" and pred.trace[0]["role"] == "router"
    assert [lms[k].calls for k in ("planner", "critic", "generator")] == [0, 1, 1]
    assert pred.stop_reason == "confident" and pred.cost["lm_calls"] == 3 and pred.answer == "American"
    assert [s["step"] for s in pred.trace] == list(range(len(pred.trace)))


@pytest.mark.parametrize("default", ["multi_step", "single_step"])
def test_garbage_router_takes_the_default_route_and_records_it(default):
    pred, _, _ = adaptive(None, AdaptiveConfig(default_route=default), garbage_router=True)
    step = router_step(pred)
    assert step["route"] == default and step["problem"] == "unparseable"


def test_adaptive_predictors_keep_their_role_names():
    names = {n for n, _ in AdaptiveRAG(KeywordRetriever()).named_predictors()}
    assert names == {"planner", "critic", "generator", "composer", "focuser", "hop_planner", "router", "closed_book"}


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
    pred, agent, _, retriever = react(
        [react_step(), react_step(None, "finish"), {"reasoning": "r", "answer": "American"}]
    )
    assert pred.stop_reason == "finish" and len(retriever.queries) == 1 and pred.answer == "American"


def test_react_agent_garbage_falls_back_to_the_generator():
    pred, agent, gen, retriever = react(None)
    assert pred.stop_reason == "agent_failed" and pred.answer == "American" and gen.calls == 1
    assert retriever.queries == [(Q, 3)]  # nothing found by the agent: the question is searched once
    assert next(s for s in pred.trace if s["role"] == "agent")["error"]


def test_search_tool_outside_forward_is_an_error():
    with pytest.raises(RuntimeError, match="only inside"):
        search("x")


@pytest.mark.parametrize(
    "args, expected",
    [
        ({"query": {"type": "string", "value": "Pulp Fiction director"}}, {"query": "Pulp Fiction director"}),
        ({"query": {"query": "Pulp Fiction director"}}, {"query": "Pulp Fiction director"}),
        ({"q": "Pulp Fiction director"}, {"query": "Pulp Fiction director"}),
        ({"query": ["Pulp", "Fiction director"]}, {"query": "Pulp Fiction director"}),
        ({"query": 1994}, {"query": "1994"}),
    ],
)
def test_repair_args_unwraps_what_a_small_model_writes(args, expected):
    from program.systems.react import repair_args

    assert repair_args(args, {"query": {"type": "string"}}) == (expected, True)


def test_repair_args_leaves_good_and_hopeless_arguments_alone():
    from program.systems.react import repair_args

    schema = {"query": {"type": "string"}}
    assert repair_args({"query": "ok"}, schema) == ({"query": "ok"}, False)
    assert repair_args({"query": {"type": "string"}}, schema) == ({"query": {"type": "string"}}, False)
    assert repair_args({"a": "x", "b": "y"}, schema) == ({"a": "x", "b": "y"}, False)


def test_react_searches_when_the_agent_echoes_the_tool_schema():
    echo = {
        "next_thought": "look it up",
        "next_tool_name": "search",
        "next_tool_args": {"query": {"type": "string", "value": "Pulp Fiction director"}},
    }
    pred, agent, gen, retriever = react(
        [echo, react_step(tool="finish", query=None), {"reasoning": "r", "answer": "Quentin Tarantino"}]
    )
    assert retriever.queries == [("Pulp Fiction director", 3)]
    step = [t for t in pred.trace if t["role"] == "agent"][0]
    assert step["searches"] == 1 and step["repaired_args"] == 1 and step["tool_errors"] == 0
    assert pred.answer == "Quentin Tarantino" and pred.stop_reason == "finish"


def test_react_counts_tool_errors_it_cannot_repair():
    bad = {"next_thought": "look it up", "next_tool_name": "search", "next_tool_args": {"query": {"type": "string"}}}
    pred, agent, gen, retriever = react([bad] * 3 + [{"reasoning": "r", "answer": "Quentin Tarantino"}])
    step = [t for t in pred.trace if t["role"] == "agent"][0]
    assert retriever.queries == [] and step["tool_errors"] == 3 and step["searches"] == 0


def test_a_repeated_search_shows_the_next_results_then_says_there_are_none():
    from program.reading.evidence import EvidencePool
    from program.systems import react as R
    from program.tracing import Budget, traced

    class Ranked:
        def retrieve(self, query, k):
            from program.types import Passage

            return [Passage(id=str(i), title=f"T{i}", text=f"text {i}") for i in range(min(k, 5))]

    with traced("Who voiced Naruto?", 2000, Budget()) as (_, tr):
        session = R._Session(Ranked(), tr, EvidencePool(), 2, 100)
        token = R._SESSION.set(session)
        try:
            first = R.search("Naruto voice actor")
            second = R.search("naruto  Voice actor")  # the same search, as the agent repeats it
            third = R.search("Naruto voice actor")
            fourth = R.search("Naruto voice actor")
        finally:
            R._SESSION.reset(token)
    assert "T0" in first and "T1" in first and "T2" not in first
    assert "searched" in second and "T2" in second and "T3" in second and "T0" not in second
    assert "T4" in third and "T3" not in third
    assert fourth.startswith("No further results") and session.repeated == 3
    assert [s["k"] for s in tr.steps if s["role"] == "retriever"] == [2, 4, 6, 8]


def test_a_sentence_from_the_agent_is_replaced_by_the_generators_span():
    sentence = "Quentin Tarantino, an American film director born in Knoxville, directed the film Pulp Fiction"
    pred, agent, gen, retriever = react(
        [react_step(), react_step(tool="finish", query=None), {"reasoning": "r", "answer": sentence}],
        fallback=("Quentin Tarantino",),
    )
    step = [t for t in pred.trace if t["role"] == "agent"][0]
    assert pred.answer == "Quentin Tarantino" and pred.stop_reason == "agent_not_a_span"
    assert step["agent_answer"] == sentence and len(retriever.queries) == 1  # the agent's evidence, no new search
    short = react([react_step(), react_step(tool="finish", query=None), {"reasoning": "r", "answer": "Tarantino"}])[0]
    assert short.answer == "Tarantino" and short.stop_reason == "finish"
