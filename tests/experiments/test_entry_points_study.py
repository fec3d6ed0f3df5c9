"""experiments/lab/studies/entry_points.py: one question through `sharp ask --json`, ``program.load`` and the
exported MLflow model, end to end over a real index of the toy corpus (tests/load_world.py) with the rule LM
over HTTP standing in for the model; and its comparison, which must tell paths that differ."""

from __future__ import annotations

import json

import dspy
import pytest
from live_servers import RuleServer
from load_world import RULES_MODEL, build_index, ship, use_hash_embedder
from toy_world import README_CASES

from experiments.lab.studies import entry_points
from program.serving import shipped


@pytest.fixture
def rules():
    server = RuleServer()
    yield server
    server.close()


def test_the_three_paths_give_the_same_answer_and_trace(tmp_path, monkeypatch, rules, new_store):
    monkeypatch.setattr(dspy, "cache", dspy.cache)  # the study turns DSPy's cache off: on again after
    use_hash_embedder(monkeypatch)
    ws = tmp_path / "ws"
    ship(tmp_path / "compiled", build_index(ws))
    monkeypatch.setattr(shipped, "COMPILED_DIR", tmp_path / "compiled")
    out_file = tmp_path / "entry-points.json"
    argv = ["--workspace", str(ws), "--lm", RULES_MODEL, "--api-base", rules.base, "--out", str(out_file)]
    out = entry_points.main([*argv, "--tracking-uri", new_store(tmp_path / "mlflow.db")])

    assert json.loads(out_file.read_text()) == json.loads(json.dumps(out))
    assert out["same_answer"] and out["same_trace"] and out["differences"] == []
    assert list(out["paths"]) == ["sharp ask", "program.load", "mlflow.pyfunc"]
    assert {p["answer"] for p in out["paths"].values()} == {README_CASES[0].answer}
    calls = [p["lm_calls"] for p in out["paths"].values()]
    assert calls[0] > 0 and rules.requests == sum(calls)  # cache off: every path asked the LM itself
    assert all(p["trace"] and "seconds" not in p["trace"][1] for p in out["paths"].values())
    assert out["program"]["name"] == "sharp-hotpotqa" and out["models"]["generator"] == RULES_MODEL


def test_the_comparison_names_what_differs():
    same = entry_points.summary("Monticello", "confident", ["r1"], ["r1"], 1, [{"role": "generator", "seconds": 1}])
    late = entry_points.summary("Monticello", "confident", ["r1"], ["r1"], 1, '[{"role": "generator", "seconds": 9}]')
    other = {**same, "answer": "Paris", "trace": [{"role": "generator", "answer": "Paris"}]}
    assert entry_points.compare({"a": same, "b": late}) == {"same_answer": True, "same_trace": True, "differences": []}
    found = entry_points.compare({"a": same, "b": late, "c": other})
    assert not found["same_answer"] and not found["same_trace"]
    assert [(d["path"], d["field"]) for d in found["differences"]] == [("c", "answer"), ("c", "trace")]
    assert found["differences"][1]["first_step"] == 0
