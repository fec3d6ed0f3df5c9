"""The JSON-schema grammar keeps the schema's property order (the critic's verdict comes first)."""

from __future__ import annotations

import json
import types

import pytest

llama_grammar = pytest.importorskip("llama_cpp.llama_grammar")

from program.lm.local import LocalSession  # noqa: E402


def test_properties_reach_the_grammar_in_schema_order(monkeypatch):
    seen = []
    monkeypatch.setattr(
        llama_grammar.LlamaGrammar,
        "from_json_schema",
        classmethod(lambda cls, text, verbose=False: seen.append(text) or "G"),
    )
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string"},
            "confidence": {"type": "number"},
            "missing_information": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["verdict", "confidence", "missing_information"],
    }
    session = types.SimpleNamespace(_grammars={})
    grammar = LocalSession._grammar(session, {"type": "json_schema", "json_schema": {"schema": schema}})
    assert grammar == "G"
    assert list(json.loads(seen[0])["properties"]) == ["verdict", "confidence", "missing_information"]
    assert LocalSession._grammar(session, {"type": "json_schema", "json_schema": {"schema": schema}}) == "G"
    assert len(seen) == 1  # cached
