"""Every registered system: SharpRAG's prediction keys, bounded under garbage; registry and runtime wiring."""

from __future__ import annotations

import pytest
from doubles import GarbageLM, KeywordRetriever, ScriptedLM, assign

from program.errors import ConfigError
from program.serving.registry import UnknownSystemError, build_system, config_for, system_names
from program.sharp.module import SharpRAG
from program.systems.closed_book import ClosedBook

SHARP_KEYS = {
    "answer",
    "passages",
    "cited_ids",
    "trace",
    "cost",
    "calls",
    "sub_queries",
    "queries",
    "retries",
    "stop_reason",
    "system",
}
ARENA = [
    "closed-book",
    "vanilla-dense",
    "vanilla-hybrid",
    "vanilla-hop",
    "vanilla-lmrerank",
    "self-rag",
    "crag",
    "adaptive",
    "react",
]


def garbage_everywhere(module):
    g = GarbageLM()
    for _, pred in module.named_predictors():
        pred.lm = g
    return g


def test_the_arena_systems_are_registered():
    assert set(ARENA) | {"sharp", "vanilla", "vanilla-rerank"} <= set(system_names())


@pytest.mark.parametrize("name", ARENA + ["sharp", "vanilla"])
def test_same_prediction_shape_and_bounded_under_garbage(name):
    module = build_system(name, KeywordRetriever())
    garbage_everywhere(module)
    pred = module(question="What nationality is the director of Pulp Fiction?")
    assert set(pred.keys()) == SHARP_KEYS
    assert pred.system == name and isinstance(pred.answer, str) and pred.answer
    assert isinstance(pred.trace, list) and pred.trace and all("role" in s for s in pred.trace)
    assert pred.cost["lm_calls"] == len(pred.calls) and pred.cost["lm_calls"] <= 60
    assert all(hasattr(p, "id") for p in pred.passages)


def test_sharp_keys_are_the_reference():
    module = SharpRAG(KeywordRetriever())
    garbage_everywhere(module)
    assert set(module(question="Is Paris the capital of France?").keys()) == SHARP_KEYS


def test_closed_book_needs_no_retriever():
    assert ClosedBook.NEEDS_RETRIEVER is False
    module = build_system("closed-book", None)
    assign(module, {"generator": ScriptedLM("generator", [{"answer": "Answer: Paris."}])})
    pred = module(question="What is the capital of France?")
    assert pred.answer == "Paris" and pred.passages == [] and pred.stop_reason == "closed_book"
    assert pred.cost["lm_calls"] == 1


def test_retrieval_modes_are_config():
    assert config_for("vanilla-dense").retrieval_mode == "dense"
    assert config_for("vanilla-hybrid").retrieval_mode == "hybrid"
    assert config_for("vanilla-rerank").retrieval_mode == "hybrid"
    assert config_for("vanilla-dense", {"retrieval_mode": "bm25"}).retrieval_mode == "bm25"
    with pytest.raises(ConfigError, match="retrieval_mode"):
        config_for("vanilla-dense", {"retrieval_mode": "magic"})
    assert not hasattr(config_for("vanilla"), "retrieval_mode")  # 'vanilla' keeps the default retriever


def test_unknown_system_lists_the_valid_names():
    with pytest.raises(UnknownSystemError) as info:
        config_for("self_rag")
    for name in ("self-rag", "crag", "adaptive", "react", "closed-book", "vanilla-rerank"):
        assert name in str(info.value)


def test_arena_predictors_map_to_known_roles():
    from program.lm.roles import ROLES, role_of

    for name in ARENA:
        module = build_system(name, KeywordRetriever())
        roles = {role_of(n, module) for n, _ in module.named_predictors()}
        assert roles <= set(ROLES), (name, roles)


def test_runtime_opens_the_retriever_in_the_systems_mode(monkeypatch, tmp_path):
    import experiments.runtime as runtime

    monkeypatch.setattr(runtime, "configure_cache", lambda *a: None)
    monkeypatch.setattr(runtime, "assign_lms", lambda *a: {})
    opened = []

    def fake_retriever(self, overrides=None):
        opened.append(overrides)
        return KeywordRetriever()

    monkeypatch.setattr(runtime.Runtime, "retriever", fake_retriever)
    rt = runtime.Runtime(workspace=tmp_path)
    assert rt.system("vanilla-dense").SYSTEM == "vanilla-dense" and opened == [{"mode": "dense"}]
    opened.clear()
    assert rt.system("vanilla-hop").SYSTEM == "vanilla-hop" and opened == [{"mode": "hybrid", "second_hop": True}]
    opened.clear()
    rt.system("vanilla")
    assert opened == [None]  # plain RAG keeps the runtime's default retriever
    opened.clear()
    crag = rt.system("crag")
    assert opened == [None, {"mode": "bm25"}] and crag.fallback_retriever is not None
    opened.clear()
    rt.system("crag", {"fallback": "none"})
    assert opened == [None]
    opened.clear()
    rt.system("closed-book")
    assert opened == []


def test_the_arena_opens_one_retriever_per_distinct_setting():
    from experiments.jobs.arena import _build

    class FakeRuntime:
        def __init__(self):
            self.opened, self.built = [], []

        def retriever(self, overrides=None):
            self.opened.append(overrides)
            return KeywordRetriever()

        def system(self, name, values, retriever=None):
            self.built.append((name, retriever))
            return build_system(name, retriever)

    rt, shared = FakeRuntime(), {}
    for name in ("vanilla", "sharp", "vanilla-hop", "vanilla-dense", "vanilla-hop", "closed-book"):
        _build(rt, name, {}, shared)
    assert rt.opened == [None, {"ranker": "dataset"}, {"mode": "hybrid", "second_hop": True}, {"mode": "dense"}]
    by_name = dict(rt.built)
    assert by_name["vanilla"] is not by_name["sharp"]  # SHARP reads over the dataset's evidence ranker by default
    assert by_name["vanilla-hop"] is by_name["vanilla-hop"] and len(rt.built) == 6
    assert by_name["vanilla-hop"] is not by_name["vanilla"] and by_name["closed-book"] is None
