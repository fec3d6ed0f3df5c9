"""The step observer (program.steps.observing): what `sharp ask` shows live. Each step arrives once, in
order, complete (the fields its caller fills in after the LM call are there), and only in the context
that installed it."""

from __future__ import annotations

import copy
import itertools
import threading

import pytest
from doubles import CORPUS, KeywordRetriever, ScriptedLM, assign

from program.registry import build_system
from program.sharp import SharpConfig, SharpRAG
from program.steps import observing
from program.types import Passage

Q = "What nationality is the director of the film that won the Palme d'Or in 1994?"


def crit(verdict, confidence, suggested=(), missing=()):
    return {
        "verdict": verdict,
        "confidence": confidence,
        "missing_information": list(missing),
        "suggested_queries": list(suggested),
    }


# one passage only the second round finds
MORE = [*CORPUS, Passage("p8", "Tarantino family", "Quentin Tarantino nationality: born in Knoxville, Tennessee.")]


def sharp(critic):
    prog = SharpRAG(KeywordRetriever(MORE), SharpConfig(max_retries=1, bridge="always"))
    assign(
        prog,
        {
            "planner": ScriptedLM("planner", [{"sub_queries": ["Palme d'Or 1994 film", "film director"]}]),
            "critic": ScriptedLM("critic", list(critic)),
            "bridge": ScriptedLM("planner", [{"entity": "Quentin Tarantino"}]),
            "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1, 2]}]),
        },
    )
    return prog


class Recorder:
    def __init__(self):
        self.events = []  # ("start", role) and ("step", a copy of the step as it was when it came)

    def on_step(self, step):
        self.events.append(("step", copy.deepcopy(step)))

    def on_start(self, role, inputs):
        assert isinstance(inputs, dict)
        self.events.append(("start", role))

    @property
    def steps(self):
        return [s for kind, s in self.events if kind == "step"]


def test_the_observer_sees_every_step_in_order_with_the_fields_shown():
    prog = sharp(
        [crit("insufficient", 0.8, ["Quentin Tarantino nationality"], ["the director"]), crit("sufficient", 0.9)]
    )
    rec = Recorder()
    with observing(rec.on_step, rec.on_start):
        pred = prog(question=Q)
    roles = [s["role"] for s in rec.steps]
    assert roles == ["planner", "retriever", "critic", "bridge", "retriever", "critic", "generator"]
    assert roles == [s["role"] for s in pred.trace]  # every step once, none twice
    assert [s["step"] for s in rec.steps] == list(range(len(pred.trace)))

    plan, r0, c0, bridge, r1, c1, gen = rec.steps
    assert plan["sub_queries"] == ["Palme d'Or 1994 film", "film director"]  # filled in after the LM call
    assert r0["k"] == 3 and r0["round"] == 0 and len(r0["queries"]) == 3 and r0["new_ids"]
    assert c0["round"] == 0 and c0["verdict"] == "insufficient" and c0["p_sufficient"] == pytest.approx(0.2)
    assert c0["missing_information"] == ["the director"] and c0["lm_calls"] == 1
    assert bridge["query"] == "Quentin Tarantino" and bridge["problem"] is None
    assert r1["k"] == 5 and r1["round"] == 1 and r1["queries"][0] == "Quentin Tarantino"
    assert c1["verdict"] == "sufficient" and c1["p_sufficient"] == pytest.approx(0.9) and c1["action"] == "stop"
    assert gen["answer"] == "American" and len(gen["cited_ids"]) == 2

    # an LM step is announced before its model is called, after the step before it was delivered
    kinds = [(k, v if k == "start" else v["role"]) for k, v in rec.events]
    assert kinds == [
        ("start", "planner"),
        ("step", "planner"),
        ("step", "retriever"),
        ("start", "critic"),
        ("step", "critic"),
        ("start", "bridge"),
        ("step", "bridge"),
        ("step", "retriever"),
        ("start", "critic"),
        ("step", "critic"),
        ("start", "generator"),
        ("step", "generator"),
    ]


def test_no_observer_outside_the_context_nor_in_another_thread():
    crits = itertools.repeat(crit("sufficient", 0.9))
    rec = Recorder()
    with observing(rec.on_step):
        other = threading.Thread(target=lambda: sharp(list(itertools.islice(crits, 1)))(question=Q))
        other.start()
        other.join()
    assert rec.steps == []
    sharp([crit("sufficient", 0.9)])(question=Q)  # after the block: nothing more arrives
    assert rec.steps == []


def test_a_failing_question_still_delivers_its_steps():
    from program.errors import LMUnavailableError

    prog = sharp([])

    class Down(ScriptedLM):
        def forward(self, *a, **k):
            raise LMUnavailableError("the server at http://127.0.0.1:9 is down")

    prog.critic.lm = Down("critic", [])
    rec = Recorder()
    with observing(rec.on_step, rec.on_start), pytest.raises(LMUnavailableError):
        prog(question=Q)
    assert [s["role"] for s in rec.steps] == ["planner", "retriever", "critic"]
    assert rec.steps[-1]["lm_failure"] is True and "down" in rec.steps[-1]["error"]


def test_a_system_inside_another_is_seen_once_in_order():
    """Adaptive-RAG routes to the SHARP loop, whose steps it copies into its own trace."""
    prog = build_system("adaptive", KeywordRetriever(), {"max_retries": 0})
    lms = {
        "router": ScriptedLM("planner", [{"complexity": "multi_step"}]),
        "planner": ScriptedLM("planner", [{"sub_queries": ["film director"]}]),
        "critic": ScriptedLM("critic", [crit("sufficient", 0.9)]),
        "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        "closed_book": ScriptedLM("generator", []),
        "bridge": ScriptedLM("planner", []),
    }
    assign(prog, lms)
    rec = Recorder()
    with observing(rec.on_step):
        pred = prog(question=Q)
    assert [s["role"] for s in rec.steps] == [s["role"] for s in pred.trace]
    assert [s["role"] for s in rec.steps][:2] == ["router", "planner"]
