"""Fixtures of the live-server tests: PostgreSQL, an MLflow server on it, the rule LM over HTTP, the toy
world as a dataset with a real index, and the toy program compiled and registered once. A server that cannot
start skips its tests with the reason.

PostgreSQL and the MLflow server take many seconds to start (the server migrates its store): once the tests
are collected, they start in the background when a selected test needs them, while the tests before them
run; the fixtures then take them as started (or the reason they could not start)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from live_servers import RuleServer, Unavailable, child_env, start_mlflow_server, start_postgres
from toy_world import write_dataset
from typer.testing import CliRunner

from experiments.cli import app

_early: dict[str, Future] = {}  # "postgres", "mlflow": started in the background, not yet taken by a fixture


def _servers_of(item) -> set[str]:
    """The server fixtures a test uses (test_faults.py's shared_storage asks for both by name)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    names = set(item.fixturenames) | (
        {"postgres", "mlflow_server"} if params.get("shared_storage") == "postgresql" else set()
    )
    return names & {"postgres", "mlflow_server"}


def _start_mlflow_on(postgres: Future, env: dict[str, str]) -> tuple:
    """(the MLflow server on a new database of the cluster, its folder): run after PostgreSQL started."""
    backend = postgres.result().create_database("mlflow")
    folder = Path(tempfile.mkdtemp(prefix="sharp-mlflow-server-"))
    try:
        return start_mlflow_server(backend, folder, env=env), folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def pytest_collection_finish(session):
    needed = set().union(*(_servers_of(item) for item in session.items))
    # on parallel workers (`make test`) a worker learns which test files it runs only as it gets them: a test's
    # fixture starts the servers on the worker that runs it, while the others go on
    if session.config.option.collectonly or not needed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    pool = ThreadPoolExecutor(2, thread_name_prefix="servers")
    _early["postgres"] = pool.submit(start_postgres)
    if "mlflow_server" in needed:
        # the environment as it is before any test runs (a test may set variables meanwhile)
        _early["mlflow"] = pool.submit(_start_mlflow_on, _early["postgres"], child_env())
    pool.shutdown(wait=False)


def _discard(server, folder: Path) -> None:
    """A throwaway MLflow server killed, not asked to stop (a graceful stop takes seconds); its folder removed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    shutil.rmtree(folder, ignore_errors=True)


def pytest_sessionfinish(session):
    """Stop what started in the background but no fixture took (a run stopped before the tests using it)."""
    mlflow, postgres = _early.pop("mlflow", None), _early.pop("postgres", None)
    if mlflow is not None and mlflow.exception(timeout=300) is None:
        _discard(*mlflow.result())
    if postgres is not None and postgres.exception(timeout=300) is None:
        postgres.result().stop()


@pytest.fixture(scope="session")
def postgres():
    try:
        pg = _early.pop("postgres").result() if "postgres" in _early else start_postgres()
    except Unavailable as exc:
        pytest.skip(f"PostgreSQL cannot start here: {exc}")
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def mlflow_server(postgres, tmp_path_factory):
    """``mlflow server`` with a PostgreSQL backend store and proxied artifacts."""
    try:
        if "mlflow" in _early:
            server, folder = _early.pop("mlflow").result()
        else:
            folder = tmp_path_factory.mktemp("mlflow-server")
            server = start_mlflow_server(postgres.create_database("mlflow"), folder)
    except Unavailable as exc:
        pytest.skip(f"the MLflow server cannot start here: {exc}")
    yield server
    _discard(server, folder)


@pytest.fixture(scope="session")
def rule_lm():
    server = RuleServer()
    yield server
    server.close()


@dataclass
class Toy:
    """The toy world as `sharp` sees it: a datasets folder, a workspace holding its index, the LM options."""

    data: Path
    workspace: Path
    lm_base: str

    def args(self, workspace: Path | None = None, cache: Path | None = None) -> list[str]:
        out = ["--data-dir", str(self.data), "--workspace", str(workspace or self.workspace)]
        out += ["--lm", "openai/rules", "--api-base", self.lm_base]
        return out + (["--cache-dir", str(cache)] if cache else [])

    def new_workspace(self, where: Path) -> Path:
        """A workspace of its own that shares the built index (a link to it)."""
        where.mkdir(parents=True, exist_ok=True)
        (where / "indexes").mkdir(exist_ok=True)
        link = where / "indexes" / "hotpotqa"
        if not link.exists():
            link.symlink_to(self.workspace / "indexes" / "hotpotqa", target_is_directory=True)
        return where


@pytest.fixture(scope="session")
def toy(tmp_path_factory, rule_lm) -> Toy:
    """DATA/hotpotqa holds the toy questions and corpus; WS/indexes/hotpotqa its real (dense + BM25) index."""
    from experiments.runtime import Runtime

    root = tmp_path_factory.mktemp("toy")
    write_dataset(root / "data")
    ws = root / "ws"
    manifest = Runtime(dataset="hotpotqa", data_dir=root / "data", workspace=ws).build_index(progress=False)
    assert manifest["status"] == "complete"
    return Toy(data=root / "data", workspace=ws, lm_base=rule_lm.base)


@pytest.fixture(scope="session")
def toy_space(tmp_path_factory) -> Path:
    """A small policy search space (the answer critic's thresholds and repairs; no critic LM)."""
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text(
        json.dumps({"threshold_low": 0.2, "threshold_high": 0.9, "max_repairs": [0, 1, 2], "ask_critic": ["off"]})
    )
    return path


def invoke(*args: str) -> str:
    """``sharp ARGS`` in this process; its stdout (the command must succeed)."""
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out.stdout


# the toy program as the tests compile it (4 train questions, 3 to validate on, BM25 retrieval)
COMPILE = ["compile", "--n-train", "4", "--n-val", "3", "--retriever-mode", "bm25", "--name", "toy"]


@dataclass
class ToyProgram:
    """The toy program compiled once (``command`` with the toy's options) in ``workspace`` and registered as
    ``model`` in ``store`` (a sqlite MLflow store); ``lm_calls``: the LM calls that uninterrupted compile made."""

    command: list[str]
    workspace: Path
    store: str
    run_id: str
    model: str
    lm_calls: int

    @property
    def program(self) -> Path:
        return self.workspace / "programs" / "toy.json"


@pytest.fixture(scope="session")
def toy_program(toy, rule_lm, tmp_path_factory, new_store) -> ToyProgram:
    """Compiled and exported once for the tests that serve it, load it or compare a resumed compile with it;
    they read it and never change it (a test that writes runs writes them to a store of its own)."""
    root = tmp_path_factory.mktemp("toy-program")
    ws = toy.new_workspace(root / "ws")
    store = new_store(root / "mlflow.db")
    before = rule_lm.requests
    out = invoke(*COMPILE, *toy.args(ws, root / "cache"), "--tracking-uri", store)
    lm_calls = rule_lm.requests - before
    run_id = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("run:"))
    exported = invoke("export", run_id, "--name", "toy-served", "--workspace", str(ws), "--tracking-uri", store)
    assert "models:/toy-served/1" in exported
    return ToyProgram(
        command=COMPILE, workspace=ws, store=store, run_id=run_id, model="models:/toy-served/1", lm_calls=lm_calls
    )
