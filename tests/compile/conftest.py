"""Fixtures of the compile/tune/export tests: the toy world (tests/toy_world.py) with LMs whose answers
are a deterministic function of their prompt's inputs (the generator's and the critic's with token
log-probabilities: tests/doubles.py FieldLM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy
import pytest
from doubles import FieldLM, KeywordRetriever, ScriptedLM
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from toy_world import CASES, CORPUS, RULES, fields_of

from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig


class RuleEngine(DummyEngine):
    def _complete_messages(self, messages):
        out = self.owner.rule(fields_of(messages[-1]["content"]))
        if "`reasoning`" in messages[0]["content"]:  # a ChainOfThought predictor: think first
            out = {"reasoning": "Reading the passages step by step.", **out}
        text = self.owner._format_answer_fields(out)
        return Response(
            id=None,
            model="dummy",
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0),
        )


class RuleLM(ScriptedLM):
    """Answers ``rule(fields of the last user message)`` as DummyLM does (an optimizer's proposer); accounted
    like ScriptedLM."""

    def __init__(self, role: str, rule: Callable[[dict], dict]):
        super().__init__(role, [])
        self.rule = rule
        self._install()

    def _install(self) -> None:
        self._engine_spec = RuleEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied._install()
        return copied

    def __deepcopy__(self, memo):
        return self  # stateless: copies may share it (as SharpLM copies share their engine)


def make_lms() -> dict[str, FieldLM]:
    return {role: FieldLM(role, rule) for role, rule in RULES.items()}


def assign_rules(program: dspy.Module, lms: dict[str, Any] | None = None) -> dict[str, FieldLM]:
    lms = lms or make_lms()
    for name, pred in program.named_predictors():
        pred.lm = lms[name.split(".")[0]]
    return lms


def make_examples(cases=CASES) -> list[dspy.Example]:
    return [
        dspy.Example(
            id=f"q{i}",
            question=c.question,
            answer=c.answer,
            answer_aliases=[],
            type=c.qtype,
            gold_titles=list(c.gold),
            dataset="toy",
        ).with_inputs("question")
        for i, c in enumerate(cases)
    ]


# one passage read for the draft (so repairs have something to find), three for a retrieval repair; the critic
# reads the drafts the gate is unsure of (off by default)
SMALL = SharpConfig(k_schedule=(1, 3), evidence_cap=3, sub_k=1, ask_critic="band")


class World:
    """Factories for the toy world: program(config) with rule LMs, examples, retriever, lms."""

    corpus = CORPUS
    cases = CASES
    small = SMALL

    @staticmethod
    def retriever() -> KeywordRetriever:
        return KeywordRetriever(CORPUS)

    @staticmethod
    def program(config: SharpConfig | None = None, retriever=None) -> SharpRAG:
        prog = SharpRAG(retriever or KeywordRetriever(CORPUS), config or SMALL)
        assign_rules(prog)
        return prog

    examples = staticmethod(make_examples)
    assign = staticmethod(assign_rules)
    lms = staticmethod(make_lms)
    rule_lm = RuleLM


@pytest.fixture
def world():
    """Factories for the toy world: program(config) with rule LMs, examples, retriever, lms."""
    return World()


@pytest.fixture(scope="module")
def module_world():
    """The toy world's factories for a module-scoped fixture (one compile read by a module's tests)."""
    return World()


@pytest.fixture(scope="module")
def toy_recording():
    """The toy world recorded once with SMALL in explore mode, every round critiqued: (examples, records, the
    LM calls the recording made). Module scope: tests read it, never change it."""
    from optimize.recording import record

    examples = make_examples()
    prog = SharpRAG(KeywordRetriever(CORPUS), SMALL)
    lms = assign_rules(prog)
    return examples, record(prog, examples), sum(lm.calls for lm in lms.values())


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory, new_store):
    """One sqlite tracking store (with its artifact folder) for the whole session."""
    from types import SimpleNamespace

    from experiments import tracking

    ws = tmp_path_factory.mktemp("mlflow-ws")
    uri = new_store(ws / "mlflow.db")
    tracking.configure(uri, ws, "compile-tests")
    return SimpleNamespace(uri=uri, ws=ws)


@pytest.fixture
def tracked(mlflow_store, request):
    """The session store with an experiment of this test's own; ``runs()`` lists its runs. No run is
    left active afterwards."""
    from types import SimpleNamespace

    import mlflow

    from experiments import tracking

    name = request.node.name[:80]
    tracking.configure(mlflow_store.uri, mlflow_store.ws, name)

    def runs():
        exp = mlflow.get_experiment_by_name(name)
        return mlflow.search_runs([exp.experiment_id], output_format="list") if exp else []

    yield SimpleNamespace(uri=mlflow_store.uri, ws=mlflow_store.ws, experiment=name, runs=runs)
    while mlflow.active_run() is not None:
        mlflow.end_run()
