"""Runs left RUNNING by a process that died without closing them are marked KILLED by the next start on the
same host; runs of live processes, of other hosts and of other tools are left alone."""

from __future__ import annotations

import socket
import subprocess
import sys

import mlflow
from mlflow.tracking import MlflowClient

from experiments import tracking


def test_runs_of_dead_processes_are_marked_killed_on_the_next_start(tmp_path, new_store):
    uri = new_store(tmp_path / "mlflow.db")
    tracking.configure(uri, tmp_path, "reap")
    with tracking.run("mine") as active:
        mine = mlflow.get_run(active.info.run_id)
        assert mine.data.tags[tracking.PID_TAG] and mine.data.tags[tracking.HOST_TAG] == socket.gethostname()
        assert mine.info.status == "RUNNING"
        tracking.configure(uri, tmp_path, "reap")  # this process lives: its open run stays open
        assert mlflow.get_run(active.info.run_id).info.status == "RUNNING"

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    client = MlflowClient()
    exp = mlflow.get_experiment_by_name("reap").experiment_id
    host = socket.gethostname()
    dead = client.create_run(exp, tags={tracking.HOST_TAG: host, tracking.PID_TAG: str(child.pid)}).info.run_id
    elsewhere = client.create_run(exp, tags={tracking.HOST_TAG: "another-host", tracking.PID_TAG: str(child.pid)})
    foreign = client.create_run(exp)  # not started by this project: no process tags

    tracking.configure(uri, tmp_path, "another-experiment")  # any later command, any experiment
    assert client.get_run(dead).info.status == "KILLED"
    assert "ended without closing the run" in client.get_run(dead).data.tags[tracking.ENDED_TAG]
    assert client.get_run(dead).info.end_time is not None
    assert client.get_run(elsewhere.info.run_id).info.status == "RUNNING"
    assert client.get_run(foreign.info.run_id).info.status == "RUNNING"
    assert tracking.reap_dead_runs() == []
