"""`sharp mlflow-ui` (what `make mlflow-ui` runs): the real MLflow UI on a workspace's SQLite store answers
HTTP, runs no job runner beside it (MLflow 3 starts huey consumers by default: CPU taken from the evaluation
being watched), and SIGTERM stops every process of it."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import time

import pytest
from live_servers import Unavailable, child_env, free_port, sharp_cmd, stop_process, wait_http

pytestmark = pytest.mark.servers
psutil = pytest.importorskip("psutil")

JOB_RUNNER = ("huey", "_job_runner", "_periodic_tasks_consumer")


def cmdline(process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""


def test_the_ui_answers_without_a_job_runner_and_sigterm_stops_every_process(tmp_path):
    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.skip("mlflow (with uvicorn) is not installed here")
    port, log = free_port(), tmp_path / "ui.log"
    env = child_env()
    env.pop("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", None)  # MLflow's default, as a user has it
    command = sharp_cmd("mlflow-ui", "--workspace", str(tmp_path / "ws"), "--port", str(port))
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/health", 180, proc, log)
        except Unavailable as exc:
            if "MLflow UI on http://" not in log.read_text(errors="replace"):  # said just before MLflow starts
                pytest.fail(f"`sharp mlflow-ui` did not start the UI: {exc}")
            pytest.skip(f"the MLflow UI cannot start here: {exc}")
        assert (tmp_path / "ws" / "mlflow.db").exists()  # the workspace's store, made by the UI
        time.sleep(2)  # MLflow launches its job runner right after the web server: give it the chance
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        lines = [cmdline(p) for p in tree]
        assert not [line for line in lines if any(mark in line for mark in JOB_RUNNER)], lines
        assert any("uvicorn" in line for line in lines), lines  # (the tree is the UI's, seen whole)

        os.kill(proc.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(tree, timeout=10)
        alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, [cmdline(p) for p in alive]
        assert proc.wait(5) is not None
    finally:
        stop_process(proc)
