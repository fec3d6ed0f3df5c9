"""A small multi-hop world for compile/tune/export tests: a corpus, questions with gold titles,
and LMs whose answers are a deterministic function of their prompt's inputs (so a replay, a
reloaded program and an exported model see exactly what a live run sees, in any call order)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy
import pytest
from doubles import KeywordRetriever, ScriptedLM
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage

from program.sharp import SharpConfig, SharpRAG
from program.types import Passage

CORPUS = [
    Passage("p1", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino. It won the Palme d'Or."),
    Passage("p2", "Quentin Tarantino", "Quentin Tarantino is an American film director and screenwriter."),
    Passage("p3", "Three Colours Red", "Three Colours Red is a 1994 film by Krzysztof Kieslowski."),
    Passage("p4", "Krzysztof Kieslowski", "Krzysztof Kieslowski was a Polish film director born in Warsaw, Poland."),
    Passage("p5", "Cannes Film Festival", "The Palme d'Or is the highest prize of the Cannes Film Festival."),
    Passage("p6", "Paris", "Paris is the capital of France; the Seine flows through it."),
    Passage("p7", "Louvre", "The Louvre is a museum in Paris."),
    Passage("p8", "Poland", "Poland is a country whose capital is Warsaw; Polish is spoken there."),
    Passage("p9", "Warsaw", "Warsaw is the capital of Poland."),
    Passage("p10", "iPhone", "The iPhone is a smartphone made by Apple Inc."),
    Passage("p11", "Apple Inc.", "Apple Inc. was founded by Steve Jobs, Steve Wozniak and Ronald Wayne."),
    Passage("p12", "Film", "A film is a work of visual art. Many films win prizes at festivals."),
]


@dataclass(frozen=True)
class Case:
    question: str
    answer: str
    gold: tuple[str, str]
    plan: tuple[str, ...]
    qtype: str = "bridge"
    # the critic wrongly says "sufficient" (confidence 0.6) when only the first gold title is present
    overconfident: bool = False
    # the critic's suggestion changes every round (and finds nothing new: the gold is not in the corpus)
    rotating: bool = False


CASES = [
    Case(
        "What nationality is the director of Pulp Fiction?",
        "American",
        ("Pulp Fiction", "Quentin Tarantino"),
        ("Pulp Fiction director",),
    ),
    Case(
        "Which country is the director of Three Colours Red from?",
        "Poland",
        ("Three Colours Red", "Krzysztof Kieslowski"),
        ("Three Colours Red film",),
        overconfident=True,
    ),
    Case("Which river flows through the city where the Louvre is?", "Seine", ("Louvre", "Paris"), ("Louvre museum",)),
    Case(
        "Are Pulp Fiction and Three Colours Red both from 1994?",
        "yes",
        ("Pulp Fiction", "Three Colours Red"),
        ("Pulp Fiction", "Three Colours Red"),
        qtype="comparison",
    ),
    Case("Who founded the company that makes the iPhone?", "Steve Jobs", ("iPhone", "Apple Inc."), ("iPhone maker",)),
    Case(
        "What is the capital of the country where Krzysztof Kieslowski was born?",
        "Warsaw",
        ("Krzysztof Kieslowski", "Poland"),
        ("Krzysztof Kieslowski birthplace",),
    ),
    Case(
        "Which festival awards the prize that Pulp Fiction won?",
        "Cannes Film Festival",
        ("Pulp Fiction", "Cannes Film Festival"),
        ("Pulp Fiction prize",),
        overconfident=True,
    ),
    Case(
        "What language is spoken in the country whose capital is Warsaw?",
        "Polish",
        ("Warsaw", "Poland"),
        ("capital Warsaw",),
    ),
    Case(
        "Who co-wrote the screenplay of Pulp Fiction?",
        "Roger Avary",
        ("Pulp Fiction", "Roger Avary"),
        ("Pulp Fiction screenplay",),
        rotating=True,
    ),
]
BY_QUESTION = {c.question: c for c in CASES}

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S)
_TITLE = re.compile(r"^\[\d+\] (.*?): ", re.M)


def fields_of(content: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(content)}


def evidence_titles(evidence: str) -> list[str]:
    return _TITLE.findall(evidence or "")


def plan_rule(f: dict) -> dict:
    case = BY_QUESTION.get(f.get("question", ""))
    return {"sub_queries": list(case.plan) if case else []}


def critic_rule(f: dict) -> dict:
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    if case is None:
        return {"verdict": "insufficient", "confidence": 0.5, "missing_information": [], "suggested_queries": []}
    missing = [t for t in case.gold if t not in titles]
    n = len(titles)
    if not missing:
        return {
            "verdict": "sufficient",
            "confidence": 0.9 if n <= 3 else 0.75,
            "missing_information": [],
            "suggested_queries": [],
        }
    if case.overconfident and len(missing) == 1:
        return {"verdict": "sufficient", "confidence": 0.6, "missing_information": [], "suggested_queries": []}
    query = f"{missing[0]} facts" + (f" {n}" if case.rotating else "")
    return {
        "verdict": "insufficient",
        "confidence": 0.8 if n % 2 else 0.65,
        "missing_information": [f"facts about {missing[0]}"],
        "suggested_queries": [query],
    }


def bridge_rule(f: dict) -> dict:
    """The next query from the evidence: the first missing gold title (or a repeat when none is)."""
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    missing = [t for t in case.gold if t not in titles] if case else []
    return {"query": f"{missing[0]} bridge" if missing else f.get("question", "")}


def generator_rule(f: dict) -> dict:
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    if case and all(t in titles for t in case.gold):
        return {"answer": case.answer, "supporting_passages": [1]}
    if case and case.gold[0] in titles:
        return {"answer": "the " + case.gold[0], "supporting_passages": [1]}
    return {"answer": "unknown", "supporting_passages": []}


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
    """Answers ``rule(fields of the last user message)``; accounted like ScriptedLM."""

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


RULES = {"planner": plan_rule, "critic": critic_rule, "bridge": bridge_rule, "generator": generator_rule}


def make_lms() -> dict[str, RuleLM]:
    return {role: RuleLM(role, rule) for role, rule in RULES.items()}


def assign_rules(program: dspy.Module, lms: dict[str, Any] | None = None) -> dict[str, RuleLM]:
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


SMALL = SharpConfig(k_schedule=(1, 2, 2, 2), evidence_cap=4, max_retries=3, confidence_threshold=0.7)


@pytest.fixture
def world():
    """Factories for the toy world: program(config) with rule LMs, examples, retriever, lms."""

    class World:
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

    return World()


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """One sqlite tracking store (with its artifact folder) for the whole session."""
    from types import SimpleNamespace

    from experiments import tracking

    ws = tmp_path_factory.mktemp("mlflow-ws")
    uri = f"sqlite:///{ws}/mlflow.db"
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
