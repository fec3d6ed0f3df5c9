"""An exported program served by ``mlflow models serve`` answers a real HTTP /invocations request exactly as
``sharp ask --program models:/NAME/VERSION`` does. The served process gets its LM by configuration alone
(SHARP_LM / SHARP_API_BASE: the rule LM over HTTP) and opens the real index recorded at compile time."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from live_servers import Unavailable, child_env, free_port, stop_process, wait_http
from toy_world import CASES
from typer.testing import CliRunner

from experiments.cli import app

pytestmark = pytest.mark.servers


def invoke(*args: str) -> str:
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out.stdout


@pytest.fixture
def served_model(toy_program, rule_lm, tmp_path):
    """The toy program compiled and exported once (conftest.py toy_program) served; yield (base URL, store,
    workspace)."""
    store, ws = toy_program.store, toy_program.workspace
    port = free_port()
    log = tmp_path / "serve.log"
    env = child_env(
        MLFLOW_TRACKING_URI=store,
        SHARP_LM="openai/rules",
        SHARP_API_BASE=rule_lm.base,
        DSPY_CACHEDIR=str(tmp_path / "serve-cache"),
    )
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    cmd = [str(mlflow_bin), "models", "serve", "-m", toy_program.model, "--env-manager", "local"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [*cmd, "--host", "127.0.0.1", "-p", str(port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/ping", 240, proc, log)
    except Unavailable as exc:
        stop_process(proc)
        pytest.fail(f"mlflow models serve did not come up: {exc}")
    yield base, store, ws
    stop_process(proc)


def test_the_served_model_answers_like_sharp_ask(served_model, toy, toy_program, rule_lm):
    base, store, ws = served_model
    questions = [c.question for c in CASES]
    body = json.dumps({"dataframe_records": [{"question": q} for q in questions]}).encode()
    before = rule_lm.requests
    request = urllib.request.Request(
        base + "/invocations", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        served = json.loads(resp.read())["predictions"]
    assert rule_lm.requests > before  # the served process called the rule LM over HTTP
    assert [row["question"] for row in served] == questions

    for row in served:
        asked = json.loads(
            invoke(
                "ask", row["question"], "--program", toy_program.model, "--json", "--no-cache",
                *toy.args(ws), "--tracking-uri", store,
            ).strip().splitlines()[-1]
        )  # fmt: skip
        assert row["error"] is None
        assert row["answer"] == asked["answer"]
        assert row["passage_ids"] == [p["id"] for p in asked["passages"]]
        assert row["cited_ids"] == asked["cited_ids"]
        assert (row["retries"], row["stop_reason"]) == (asked["retries"], asked["stop_reason"])
        assert row["lm_calls"] == asked["cost"]["lm_calls"]
    assert sum(row["answer"] == c.answer for row, c in zip(served, CASES)) >= 5  # real answers, not blanks
