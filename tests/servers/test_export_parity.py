"""An exported program answers identically after loading in a new process (formerly
experiments/benchmarks/export_parity.py): this process reads the registered model's program JSON (checksum
and code-version checks) and answers the toy questions; then a new Python process loads the same model
through ``mlflow.pyfunc.load_model`` (the path `mlflow models serve` takes) and answers them too. DSPy's
answer cache is off in both, so every answer is computed by the rule LM over HTTP, never replayed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from live_servers import child_env
from toy_world import CASES

from experiments.export import load_for_serving, predict_rows, resolve_program_path
from experiments.runtime import configure_cache

pytestmark = pytest.mark.servers

COMPARED = ("answer", "cited_ids", "passage_ids", "stop_reason", "retries", "lm_calls", "error")

CHILD = """
import json, sys
import mlflow
from experiments.runtime import configure_cache
configure_cache(False, None)
mlflow.set_tracking_uri(sys.argv[1])
questions = json.loads(sys.stdin.read())
model = mlflow.pyfunc.load_model(sys.argv[2])
frame = model.predict({"question": questions})
print("@@ROWS@@" + frame.to_json(orient="records"))
"""


@pytest.fixture
def exported(toy_program):
    """The toy program compiled and registered once (conftest.py toy_program): (its model URI, the sqlite
    store, the workspace)."""
    return toy_program.model, toy_program.store, toy_program.workspace


def rows_in_new_process(uri: str, store: str, questions: list[str], env: dict, cwd) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, store, uri],
        input=json.dumps(questions),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("@@ROWS@@")), None)
    assert line is not None, out.stdout[-2000:]
    return json.loads(line[len("@@ROWS@@") :])


def test_an_exported_program_answers_identically_in_a_new_process(exported, rule_lm, tmp_path, monkeypatch):
    uri, store, ws = exported
    questions = [c.question for c in CASES]
    lm = {"SHARP_LM": "openai/rules", "SHARP_API_BASE": rule_lm.base}
    for key, value in lm.items():
        monkeypatch.setenv(key, value)

    before = rule_lm.requests
    configure_cache(False, None)
    try:
        module = load_for_serving(resolve_program_path(uri, ws, tracking_uri=store))
        here = json.loads(predict_rows(module, questions).to_json(orient="records"))
    finally:
        configure_cache(True, None)
    middle = rule_lm.requests
    env = child_env(MLFLOW_TRACKING_URI=store, DSPY_CACHEDIR=str(tmp_path / "child-cache"), **lm)
    there = rows_in_new_process(uri, store, questions, env, tmp_path)

    assert middle > before and rule_lm.requests > middle  # both processes called the LM: nothing replayed
    assert [r["question"] for r in there] == questions == [r["question"] for r in here]
    diffs = [(a["question"], f, a[f], b[f]) for a, b in zip(here, there) for f in COMPARED if a[f] != b[f]]
    assert not diffs
    assert all(r["error"] is None for r in here) and sum(r["answer"] == c.answer for r, c in zip(here, CASES)) >= 5
