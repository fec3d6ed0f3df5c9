"""Processes killed with SIGKILL mid-run (nothing can be cleaned up on the way out): a compile resumes to the
program an uninterrupted compile makes; a study shared by two workers still ends with exactly the trials asked
for, none repeated; no MLflow run is left RUNNING; nothing on disk or in a store is corrupt."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import mlflow
import pytest
from live_servers import RuleServer, child_env, sharp_cmd
from typer.testing import CliRunner

from experiments.cli import app
from optimize.evaluate import read_results
from optimize.storage import open_storage
from program.serving.saved import read_program

pytestmark = pytest.mark.servers
log = logging.getLogger(__name__)


@pytest.fixture
def slow_lm():
    """A rule LM of its own whose replies take 50 ms, so a test can stop a run part-way."""
    server = RuleServer(delay=0.05)
    yield server
    server.close()


def start(cmd: list[str], log: Path, **env: str) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=child_env(**env), cwd=log.parent, start_new_session=True
        )


def sigkill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def wait_for(condition, timeout: float, what: str, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a worker exited ({p.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def runs_of(store: str) -> list:
    client = mlflow.MlflowClient(store)
    return client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)


def test_a_compile_killed_with_sigkill_resumes_to_the_same_program(toy, toy_program, slow_lm, tmp_path, new_store):
    def args(name: str) -> list[str]:
        ws = toy.new_workspace(tmp_path / name)
        lm = ["--lm", "openai/rules", "--api-base", slow_lm.base, "--cache-dir", str(tmp_path / name / "cache")]
        return [*toy_program.command, "--data-dir", str(toy.data), "--workspace", str(ws), *lm]

    # the reference: the same compile uninterrupted (conftest.py toy_program), and how many LM calls it made
    fresh_calls = toy_program.lm_calls

    store = new_store(tmp_path / "mlflow.db")
    mark = slow_lm.requests
    proc = start(sharp_cmd(*args("ws"), "--tracking-uri", store), tmp_path / "killed.log")
    wait_for(lambda: slow_lm.requests - mark >= fresh_calls // 2, 120, "half the compile's LM calls", [proc])
    sigkill(proc)
    killed_calls = slow_lm.requests - mark
    assert 0 < killed_calls < fresh_calls
    (killed_run,) = runs_of(store)
    assert killed_run.info.status == "RUNNING"  # what SIGKILL leaves behind

    mark = slow_lm.requests
    out = CliRunner().invoke(app, [*args("ws"), "--tracking-uri", store])
    assert out.exit_code == 0, out.output
    resumed_calls = slow_lm.requests - mark
    log.info(
        "compile LM calls: %d uninterrupted; %d before SIGKILL + %d resumed", fresh_calls, killed_calls, resumed_calls
    )
    # the calls made before the kill are not made again (one reply may have been cut in flight)
    assert resumed_calls <= fresh_calls - killed_calls + 1

    resumed = read_program(tmp_path / "ws" / "programs" / "toy.json")
    reference = read_program(toy_program.program)
    assert resumed.state == reference.state and resumed.config == reference.config
    assert resumed.meta["after"] == reference.meta["after"] and resumed.meta["before"] == reference.meta["before"]

    runs = {r.info.run_id: r for r in runs_of(store)}
    assert runs[killed_run.info.run_id].info.status == "KILLED"
    assert "ended without closing the run" in runs[killed_run.info.run_id].data.tags["sharp.ended"]
    assert [r.info.status for r in runs.values()].count("FINISHED") == 1 and len(runs) == 2
    # nothing corrupt: the tracking database, and the resumable evaluation files hold every question once
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    for path in (tmp_path / "ws" / "compile" / "toy" / "evals").glob("*.jsonl"):
        ids = [row["id"] for row in read_results(path)]
        assert sorted(set(ids)) == sorted(ids) and len(ids) == 3, path


@pytest.fixture(params=["journal", "postgresql"])
def shared_storage(request, tmp_path):
    """(study storage, tracking URI) that several worker processes can share."""
    if request.param == "journal":
        return f"journal:{tmp_path}/study.journal", f"sqlite:///{tmp_path}/mlflow.db"
    postgres = request.getfixturevalue("postgres")
    server = request.getfixturevalue("mlflow_server")
    return postgres.create_database(f"study_{uuid.uuid4().hex[:8]}"), server.uri


def test_two_workers_share_a_study_and_recover_from_a_killed_one(toy, toy_space, shared_storage, tmp_path):
    storage, tracking_uri = shared_storage
    lm = RuleServer(delay=0.05)
    study_name = f"par-{uuid.uuid4().hex[:6]}"
    ws = toy.new_workspace(tmp_path / "ws")
    cmd = sharp_cmd(
        "tune", "--trials", "12", "--n", "9", "--space", str(toy_space), "--study", study_name,
        "--storage", storage, "--data-dir", str(toy.data), "--workspace", str(ws),
        "--lm", "openai/rules", "--api-base", lm.base, "--cache-dir", str(tmp_path / "cache"),
        "--tracking-uri", tracking_uri, "--experiment", study_name,
    )  # fmt: skip
    study = None

    def trials():
        nonlocal study
        if study is None:
            import optuna

            try:
                study = optuna.load_study(study_name=study_name, storage=open_storage(storage, heartbeat_s=0))
            except KeyError:  # not created yet
                return []
        return study.get_trials(deepcopy=False)

    def busy(pid: int) -> bool:  # a trial of worker ``pid`` is recording (its parameters are drawn)
        return any(
            t.state.name == "RUNNING" and t.params and (t.user_attrs.get("worker") or {}).get("pid") == pid
            for t in trials()
        )

    lm.hold()  # each worker's first trial waits on the LM, so both are mid-trial at once
    try:
        a = start(cmd, tmp_path / "a.log")
        b = start(cmd, tmp_path / "b.log")
        wait_for(lambda: busy(a.pid) and busy(b.pid), 80, "both workers running a trial", [a, b])
        (victim,) = [t for t in trials() if t.state.name == "RUNNING" and t.user_attrs["worker"]["pid"] == a.pid]
        sigkill(a)
        lm.release()
        a2 = start(cmd, tmp_path / "a2.log")  # the killed worker is restarted
        for p, name in ((b, "b.log"), (a2, "a2.log")):
            assert p.wait(300) == 0, (tmp_path / name).read_text()[-3000:]
    finally:
        for p in (a, b, locals().get("a2")):
            if p is not None and p.poll() is None:
                sigkill(p)
        lm.close()

    final = trials()
    by_state = {s: [t for t in final if t.state.name == s] for s in ("COMPLETE", "FAIL", "RUNNING", "WAITING")}
    assert len(by_state["COMPLETE"]) == 12  # exactly the trials asked for, over all workers
    assert not by_state["RUNNING"] and not by_state["WAITING"]
    points = [tuple(sorted(t.params.items())) for t in by_state["COMPLETE"]]
    assert len(set(points)) == len(points)  # no parameter set twice
    # the trial the kill cut was failed, and run again with its parameters
    assert victim.number in [t.number for t in by_state["FAIL"]]
    (retry,) = [t for t in by_state["COMPLETE"] if t.system_attrs.get("failed_trial") == victim.number]
    # every parameter the killed trial had drawn is reused (the kill may land between two suggestions,
    # so the retry may draw the rest itself)
    (killed,) = [t for t in final if t.number == victim.number]
    assert killed.params and killed.params.items() <= retry.params.items()
    workers = {t.user_attrs["worker"]["pid"] for t in by_state["COMPLETE"]}
    log.info(
        "%s: %d trials complete (B %d, restarted A %d), %d failed (trial %d killed; %d skipped)",
        storage.split(":")[0],
        len(by_state["COMPLETE"]),
        sum(t.user_attrs["worker"]["pid"] == b.pid for t in by_state["COMPLETE"]),
        sum(t.user_attrs["worker"]["pid"] == a2.pid for t in by_state["COMPLETE"]),
        len(by_state["FAIL"]),
        victim.number,
        sum(bool(t.user_attrs.get("skipped")) for t in by_state["FAIL"]),
    )
    assert b.pid in workers and a.pid not in workers | {None}
    # every other FAIL is a reserved trial skipped without parameters, never a lost evaluation
    assert all(t.user_attrs.get("skipped") and not t.params for t in by_state["FAIL"] if t.number != victim.number)

    runs = [r for r in runs_of(tracking_uri) if r.data.tags.get("study") == study_name]
    parents = {int(r.data.tags["sharp.pid"]): r for r in runs if r.data.tags.get("kind") == "tune"}
    assert parents[a.pid].info.status == "KILLED" and "sharp.ended" in parents[a.pid].data.tags
    assert parents[b.pid].info.status == parents[a2.pid].info.status == "FINISHED"
    assert not [r for r in runs if r.info.status == "RUNNING"]
    nested = [r for r in runs if r.data.tags.get("kind") == "tune-trial" and r.data.tags["optuna.state"] == "COMPLETE"]
    assert sorted(int(r.data.tags["optuna.trial"]) for r in nested) == sorted(t.number for t in by_state["COMPLETE"])
