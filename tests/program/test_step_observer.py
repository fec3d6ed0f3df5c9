"""The step observer (program.tracing.observing): what `sharp ask` shows live. Each step arrives once, in
order, complete (the fields its caller fills in after the LM call are there), and only in the context
that installed it."""

from __future__ import annotations

import copy
import threading

import dspy
import pytest
from doubles import FieldLM, KeywordRetriever, ScriptedLM, assign

from program.serving.registry import build_system
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig
from program.tracing import observing

Q = "What nationality is the director of Pulp Fiction?"


def crit(verdict, p):
    return {"verdict": verdict, "confidence": p, "_logprobs": {"verdict": {verdict: p, "supported": 1 - p}}}


def sharp(critic):
    """SHARP whose draft names the bridge entity with little confidence and whose re-read is sure."""
    prog = SharpRAG(KeywordRetriever(), SharpConfig(ask_critic="band", repair_bridge=("retrieve",)))
    drafts = iter([("Quentin Tarantino", [-1.0]), ("American", [-0.05])])

    def generator(fields):
        answer, lps = next(drafts)
        return {"answer": answer, "supporting_passages": [1, 2], "_logprobs": {"answer": lps}}

    assign(
        prog,
        {
            "planner": FieldLM("planner", lambda f: {"sub_questions": []}),
            "critic": critic if isinstance(critic, dspy.BaseLM) else FieldLM("critic", lambda f: critic),
            "generator": FieldLM("generator", generator),
            "composer": FieldLM("composer", lambda f: {"answer": "x"}),
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
    prog = sharp(crit("incomplete", 0.8))
    rec = Recorder()
    with observing(rec.on_step, rec.on_start):
        pred = prog(question=Q)
    roles = [s["role"] for s in rec.steps]
    assert roles == ["retriever", "generator", "critic", "judgement", "retriever", "generator", "judgement", "select"]
    assert roles == [s["role"] for s in pred.trace]  # every step once, none twice
    assert [s["step"] for s in rec.steps] == list(range(len(pred.trace)))

    r0, g0, c0, j0, r1, g1, j1, chosen = rec.steps
    assert r0["k"] == 3 and r0["round"] == 0 and r0["queries"] == [Q] and r0["new_ids"]
    # filled in after the LM call: the answer and its confidence, the verdict and its probability
    assert g0["answer"] == "Quentin Tarantino" and g0["answer_confidence"]["mean"] == pytest.approx(-1.0)
    assert c0["round"] == 0 and c0["verdict"] == "incomplete" and c0["p_supported"] == pytest.approx(0.2)
    assert "missing_information" not in c0 and c0["lm_calls"] == 1
    assert c0["draft_answer"] == "Quentin Tarantino"
    assert (j0["action"], j0["source"], j0["accepted"]) == ("draft", "critic", False)
    assert r1["k"] == 5 and r1["round"] == 1 and r1["queries"] == [f"{Q} Quentin Tarantino"]
    assert g1["answer"] == "American" and len(g1["cited_ids"]) == 2
    assert (j1["action"], j1["source"], j1["accepted"]) == ("retrieve", "gate", True)
    assert chosen["answer"] == "American" and chosen["round"] == 1

    # an LM step is announced before its model is called, after the step before it was delivered
    kinds = [(k, v if k == "start" else v["role"]) for k, v in rec.events]
    assert kinds == [
        ("step", "retriever"),
        ("start", "generator"),
        ("step", "generator"),
        ("start", "critic"),
        ("step", "critic"),
        ("step", "judgement"),
        ("step", "retriever"),
        ("start", "generator"),
        ("step", "generator"),
        ("step", "judgement"),
        ("step", "select"),
    ]


def test_no_observer_outside_the_context_nor_in_another_thread():
    rec = Recorder()
    with observing(rec.on_step):
        other = threading.Thread(target=lambda: sharp(crit("supported", 0.9))(question=Q))
        other.start()
        other.join()
    assert rec.steps == []
    sharp(crit("supported", 0.9))(question=Q)  # after the block: nothing more arrives
    assert rec.steps == []


def test_a_failing_question_still_delivers_its_steps():
    from program.errors import LMUnavailableError

    class Down(ScriptedLM):
        def forward(self, *a, **k):
            raise LMUnavailableError("the server at http://127.0.0.1:9 is down")

    prog = sharp(Down("critic", []))
    rec = Recorder()
    with observing(rec.on_step, rec.on_start), pytest.raises(LMUnavailableError):
        prog(question=Q)
    assert [s["role"] for s in rec.steps] == ["retriever", "generator", "critic"]
    assert rec.steps[-1]["lm_failure"] is True and "down" in rec.steps[-1]["error"]


def test_a_system_inside_another_is_seen_once_in_order():
    """Adaptive-RAG routes to the SHARP loop, whose steps it copies into its own trace."""
    prog = build_system("adaptive", KeywordRetriever(), {"max_repairs": 0, "ask_critic": "always"})
    lms = {
        "router": ScriptedLM("planner", [{"complexity": "multi_step"}]),
        "planner": ScriptedLM("planner", []),
        "critic": FieldLM("critic", lambda f: crit("supported", 0.9)),
        "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        "closed_book": ScriptedLM("generator", []),
        "composer": ScriptedLM("generator", []),
    }
    assign(prog, lms)
    rec = Recorder()
    with observing(rec.on_step):
        pred = prog(question=Q)
    assert [s["role"] for s in rec.steps] == [s["role"] for s in pred.trace]
    assert [s["role"] for s in rec.steps] == ["router", "retriever", "generator", "critic", "judgement", "select"]
