"""The in-process backend and `sharp lm serve` give identical answers at temperature 0 (formerly
experiments/benchmarks/lm_parity.py). A three-call chain (plan -> critique through DSPy's JSONAdapter, so a
grammar-constrained JSON schema -> answer) runs both ways, DSPy's cache off.

Without a model: one scripted session (doubles.TimedSession) behind both paths; the session must receive
the same messages and the same generation settings (max_tokens, temperature, stop, schema) from each, and
the parsed outputs must match. With the real model (marked local_lm; SmolLM2 unless SHARP_PARITY_MODEL
names another): a fresh model in process against a `sharp lm serve` subprocess, every LM output compared."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from typing import Literal

import dspy
import pytest
from doubles import TimedSession, session_lm
from dspy.utils.exceptions import AdapterParseError
from fake_openai import QUICK_SHUTDOWN

from program.lm import SERVED_MODEL, LMSpec, build_lm
from program.lm.server import make_server

EVIDENCE = {
    "Which country is the birthplace of the director of the film Ikiru?": "Ikiru is a 1952 Japanese film directed by "
    "Akira Kurosawa. Akira Kurosawa was born in Tokyo, Japan.",
    "What river flows through the city where the Eiffel Tower stands?": "The Eiffel Tower is a wrought-iron lattice "
    "tower in Paris. The Seine flows through Paris.",
}


class Plan(dspy.Signature):
    """Break the question into at most two short search queries, in the order to run them."""

    question: str = dspy.InputField()
    queries: list[str] = dspy.OutputField(desc="one to two search queries")


class Critique(dspy.Signature):
    """Judge whether the evidence is enough to answer the question."""

    question: str = dspy.InputField()
    evidence: str = dspy.InputField()
    verdict: Literal["sufficient", "insufficient"] = dspy.OutputField()
    missing: str = dspy.OutputField(desc="what is still missing, or 'nothing'")


class Answer(dspy.Signature):
    """Answer the question from the evidence with a short phrase."""

    question: str = dspy.InputField()
    evidence: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words")


def _fields(call) -> dict:
    """The prediction's fields, or the parse error's type (a weak model may break the format: both sides
    must then break it the same way)."""
    try:
        return dict(call().toDict())
    except AdapterParseError as exc:
        return {"error": type(exc).__name__}


def chain(lm: dspy.BaseLM, evidence_of: dict[str, str] = EVIDENCE) -> list[dict]:
    plan, critique, answer = dspy.Predict(Plan), dspy.Predict(Critique), dspy.Predict(Answer)
    rows = []
    for question, evidence in evidence_of.items():
        row = {"plan": _fields(lambda q=question: plan(question=q, lm=lm))}
        with dspy.context(adapter=dspy.JSONAdapter()):
            row["critique"] = _fields(lambda q=question, e=evidence: critique(question=q, evidence=e, lm=lm))
        row["answer"] = _fields(lambda q=question, e=evidence: answer(question=q, evidence=e, lm=lm))
        rows.append(row)
    return rows


def schema_of(response_format: dict | None):
    """The JSON schema a request constrains the reply to, in either spelling (lm15 or OpenAI's)."""
    if not response_format:
        return None
    inner = response_format.get("json_schema")
    return response_format.get("schema") or (inner.get("schema") if isinstance(inner, dict) else None)


def settings(call: dict) -> dict:
    return {
        "messages": call["messages"],
        "max_tokens": call["max_tokens"],
        "temperature": float(call.get("temperature") or 0.0),
        "stop": list(call.get("stop") or []),
        "schema": schema_of(call.get("response_format")),
        "logprobs": call.get("logprobs"),
    }


@pytest.fixture
def served_session():
    """One scripted session behind `sharp lm serve`'s HTTP layer on 127.0.0.1."""
    session = TimedSession()
    server = make_server(session, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True)
    thread.start()
    yield session, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_both_backends_hand_the_model_the_same_request_and_read_the_same_answers(served_session):
    session, base = served_session
    local_rows = chain(session_lm(session, max_tokens=256))
    local_calls = list(session.calls)
    session.calls.clear()
    served = build_lm(LMSpec(model=SERVED_MODEL, api_base=base, cache=False, max_tokens=256), "generator")
    served_rows = chain(served)

    assert len(local_calls) == len(session.calls) == 3 * len(EVIDENCE)
    for a, b in zip(local_calls, session.calls):
        assert settings(a) == settings(b)
    assert [schema_of(c.get("response_format")) is not None for c in local_calls] == [False, True, False] * 2
    assert local_rows == served_rows
    assert all("error" not in part for row in local_rows for part in row.values())  # real parsed fields


# ---- the real model --------------------------------------------------------------------------------
PARITY_MODEL = os.environ.get("SHARP_PARITY_MODEL", "local/smollm2-135m")


def _installed(model: str) -> bool:
    from program.lm.local_files import missing_packages
    from program.lm.specs import LOCAL_MODELS

    name = model.split("/", 1)[1]
    return name in LOCAL_MODELS and not missing_packages(LOCAL_MODELS[name])


def _normalized(outputs: list) -> list:
    """JSON texts as parsed objects: the OpenAI-compatible client re-serializes schema-constrained JSON
    (whitespace only), so a verbatim comparison would count that as a difference."""
    out = []
    for text in outputs:
        try:
            out.append(json.loads(text))
        except (TypeError, ValueError):
            out.append(text)
    return out


@pytest.mark.local_lm
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or not _installed(PARITY_MODEL),
    reason=f"needs llama-cpp-python and {PARITY_MODEL}",
)
def test_the_real_model_answers_the_same_in_process_and_through_sharp_lm_serve(local_model):
    from experiments.lab.benchmarks.servers import lm_server

    n_ctx = local_model.n_ctx  # (the shared model's session, when PARITY_MODEL is it)
    spec = {"cache": False, "max_tokens": 64, "n_ctx": n_ctx}  # a weak model rambles: keep its replies short
    lm = build_lm(LMSpec(model=PARITY_MODEL, **spec), "generator")
    lm.engine.session.clear_states()  # as freshly loaded: no cached prefix, no live one
    one = dict(list(EVIDENCE.items())[:1])  # one question's three calls on each side (the real model is slow)
    local_rows = chain(lm, one)
    local_raw = [h["outputs"] for h in lm.history]
    with lm_server(PARITY_MODEL, n_ctx=n_ctx) as base:
        served = build_lm(
            LMSpec(model=SERVED_MODEL, api_base=base, cache=False, max_tokens=64, timeout_s=600), "generator"
        )
        served_rows = chain(served, one)
        served_raw = [h["outputs"] for h in served.history]
    # (a reply DSPy cannot parse makes it ask again through JSON: the same extra calls on both sides)
    assert len(local_raw) == len(served_raw) >= 3 * len(one)
    assert [_normalized(o) for o in local_raw] == [_normalized(o) for o in served_raw]
    assert local_rows == served_rows
