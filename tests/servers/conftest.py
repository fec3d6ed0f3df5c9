"""Fixtures of the live-server tests: PostgreSQL, an MLflow server on it, the rule LM over HTTP, and the toy
world as a dataset with a real index. A server that cannot start skips its tests with the reason."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from live_servers import RuleServer, Unavailable, start_mlflow_server, start_postgres
from toy_world import write_dataset


@pytest.fixture(scope="session")
def postgres():
    try:
        pg = start_postgres()
    except Unavailable as exc:
        pytest.skip(f"PostgreSQL cannot start here: {exc}")
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def mlflow_server(postgres, tmp_path_factory):
    """``mlflow server`` with a PostgreSQL backend store and proxied artifacts."""
    backend = postgres.create_database("mlflow")
    try:
        server = start_mlflow_server(backend, tmp_path_factory.mktemp("mlflow-server"))
    except Unavailable as exc:
        pytest.skip(f"the MLflow server cannot start here: {exc}")
    yield server
    server.stop()


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
