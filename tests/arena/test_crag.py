"""CRAG: correct / ambiguous / incorrect paths, the fallback sources, and a web source that is down or slow."""

from __future__ import annotations

import time

import pytest
from doubles import CORPUS, GarbageLM, KeywordRetriever, ScriptedLM, assign

from program.errors import ConfigError
from program.systems.crag import CorrectiveRAG, CRAGConfig, crag_grade
from program.systems.web import WebSearch, WebSearchError
from program.types import Passage

Q = "Which film by Krzysztof Kieslowski came out in 1994?"


def run(
    scores,
    config=None,
    strips=([1],),
    rewrite="Kieslowski Three Colours",
    fallback_retriever=None,
    garbage=(),
    retriever=None,
):
    retriever = retriever or KeywordRetriever()
    prog = CorrectiveRAG(retriever, config or CRAGConfig(k=3), fallback_retriever=fallback_retriever)
    lms = {
        "evaluator": ScriptedLM("critic", [{"score": s} for s in scores]),
        "refiner": ScriptedLM("critic", [{"relevant_strips": list(s)} for s in strips]),
        "rewriter": ScriptedLM("planner", [{"query": rewrite}]),
        "generator": ScriptedLM("generator", [{"answer": "Three Colours: Red", "supporting_passages": [1]}]),
    }
    for name in garbage:
        lms[name] = GarbageLM(name)
    assign(prog, lms)
    return prog(question=Q), lms, retriever


def grade_of(pred):
    return next(s for s in pred.trace if s["role"] == "crag" and "grade" in s)["grade"]


@pytest.mark.parametrize(
    "scores,expected",
    [
        ([0.9, None, 0.0], "correct"),
        ([0.1, 0.0], "incorrect"),
        ([0.3, 0.1], "ambiguous"),
        ([0.1, None], "ambiguous"),
        ([None, None], "ambiguous"),
        ([], "incorrect"),
    ],
)
def test_grade_thresholds(scores, expected):
    assert crag_grade(scores, upper=0.6, lower=0.2) == expected


def test_correct_refines_passages_into_relevant_strips_without_fallback():
    long = Passage(
        "m1",
        "Three Colours: Red",
        "Three Colours: Red is a 1994 film by Krzysztof Kieslowski. It stars Irene Jacob. It was shot in Geneva.",
    )
    pred, lms, retriever = run([0.9, 0.1, 0.0], strips=([1, 3],), retriever=KeywordRetriever([long, *CORPUS]))
    assert grade_of(pred) == "correct" and pred.stop_reason == "crag_correct"
    assert lms["rewriter"].calls == 0 and len(retriever.queries) == 1
    strip_step = next(s for s in pred.trace if s["role"] == "strip_filter")
    assert strip_step["kept_strips"] == [1, 3] and strip_step["n_strips"] == 3
    assert [(p.id, p.text) for p in pred.passages] == [
        ("m1", "Three Colours: Red is a 1994 film by Krzysztof Kieslowski. It was shot in Geneva.")
    ]


def test_incorrect_rewrites_and_searches_the_lexical_fallback():
    fallback = KeywordRetriever()
    pred, lms, retriever = run([0.0, 0.1, 0.0], fallback_retriever=fallback)
    assert grade_of(pred) == "incorrect" and lms["refiner"].calls == 0
    assert fallback.queries == [("Kieslowski Three Colours", 5)] and len(retriever.queries) == 1
    assert pred.queries == [Q, "Kieslowski Three Colours"] and pred.retries == 1
    assert {p.id for p in pred.passages} == {p.id for p in fallback.retrieve("Kieslowski Three Colours", 5)}
    step = next(s for s in pred.trace if s["role"] == "fallback")
    assert step["source"] == "lexical"


def test_without_a_fallback_retriever_the_rewritten_query_goes_to_the_main_one():
    pred, _, retriever = run([0.0, 0.0, 0.0])
    assert [q for q, _ in retriever.queries] == [Q, "Kieslowski Three Colours"]


def test_ambiguous_uses_both_refined_and_fallback_knowledge():
    fallback = KeywordRetriever()
    pred, lms, _ = run([0.4, 0.3, 0.1], fallback_retriever=fallback)
    assert grade_of(pred) == "ambiguous"
    assert lms["refiner"].calls == 1 and lms["rewriter"].calls == 1 and fallback.queries
    assert len(pred.passages) > 1


def test_garbage_evaluator_is_ambiguous_and_recorded():
    pred, lms, _ = run([], garbage=("evaluator", "refiner", "rewriter"))
    assert grade_of(pred) == "ambiguous"
    evals = [s for s in pred.trace if s["role"] == "retrieval_evaluator"]
    assert len(evals) == 3 and all(s["problem"] == "unparseable" and s["score"] is None for s in evals)
    assert next(s for s in pred.trace if s["role"] == "query_rewriter")["query"] == Q  # the safe default
    assert pred.answer == "Three Colours: Red"


def test_web_fallback_adds_web_passages(web_server):
    server = web_server()
    pred, _, _ = run([0.0, 0.0, 0.0], config=CRAGConfig(k=3, fallback="web", web_url=server.url, web_timeout_s=2))
    assert server.requests and "q=Kieslowski" in server.requests[0]
    assert [p.title for p in pred.passages] == ["Krzysztof Kieslowski (web)"]
    assert pred.passages[0].id.startswith("web:")


def test_web_fallback_down_still_answers_from_local_evidence(dead_url):
    t0 = time.perf_counter()
    pred, _, _ = run([0.0, 0.0, 0.0], config=CRAGConfig(k=3, fallback="web", web_url=dead_url, web_timeout_s=1))
    assert time.perf_counter() - t0 < 1.5
    step = next(s for s in pred.trace if s["role"] == "fallback")
    assert "failed" in step["error"]
    assert pred.answer == "Three Colours: Red" and len(pred.passages) == 3  # the retrieved passages


def test_web_fallback_slow_is_cut_at_the_timeout(web_server):
    server = web_server(delay=3.0)
    t0 = time.perf_counter()
    pred, _, _ = run([0.4, 0.1, 0.1], config=CRAGConfig(k=3, fallback="web", web_url=server.url, web_timeout_s=0.3))
    assert time.perf_counter() - t0 < 1.5
    step = next(s for s in pred.trace if s["role"] == "fallback")
    assert "within 0.3 s" in step["error"]
    assert grade_of(pred) == "ambiguous" and pred.passages  # the refined local passage


def test_web_client_rejects_bad_json(web_server, monkeypatch):
    client = WebSearch("http://127.0.0.1:1/x", timeout_s=0.5)
    with pytest.raises(WebSearchError, match="unreadable JSON"):
        client._parse(b"<html>", 3)
    with pytest.raises(WebSearchError):
        client.retrieve("anything", 3)


def test_config_validation():
    with pytest.raises(ConfigError, match="lower"):
        CRAGConfig.from_mapping({"lower": 0.8, "upper": 0.5})
    with pytest.raises(ConfigError, match="web_url"):
        CRAGConfig.from_mapping({"fallback": "web"})
    assert CorrectiveRAG.extra_retrievers(CRAGConfig()) == {"fallback_retriever": {"mode": "bm25"}}
    assert CorrectiveRAG.extra_retrievers(CRAGConfig(fallback="none")) == {}
