"""Fixtures shared by every test folder; the doubles themselves live in tests/doubles.py."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import dspy
import pytest
from doubles import KeywordRetriever
from fake_openai import FakeOpenAI


@pytest.fixture
def retriever() -> KeywordRetriever:
    return KeywordRetriever()


@pytest.fixture(autouse=True)
def _no_global_lm():
    """No test may reach a real LM by accident through dspy's global settings."""
    with dspy.context(lm=None):
        yield


@pytest.fixture
def fake_openai():
    """A real OpenAI-compatible HTTP server on 127.0.0.1, scripted to fail (tests/fake_openai.py)."""
    fake = FakeOpenAI()
    yield fake
    fake.close()


@pytest.fixture
def closed_port_base() -> str:
    """The base URL of a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory, new_store) -> str:
    """One MLflow store for the session's runs (`sharp eval`, `sharp build`; creating a store takes seconds)."""
    return new_store(tmp_path_factory.mktemp("mlflow") / "ml.db")


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> Path:
    """An MLflow SQLite store as its first use makes it (every schema migration run, the Default experiment),
    made once for the session: a new store takes seconds to migrate, each time."""
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    path = tmp_path_factory.mktemp("mlflow-empty") / "mlflow.db"
    _get_sqlalchemy_store(f"sqlite:///{path}", None).engine.dispose()  # the file closed, whole
    return path


@pytest.fixture(scope="session")
def new_store(empty_mlflow_store):
    """``new_store(PATH)``: a new, empty MLflow store at PATH (a copy of ``empty_mlflow_store``); its URI. For a
    test of what is logged, not of how a store is created (that one lets its command create the store)."""

    def make(path: Path) -> str:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(empty_mlflow_store, path)
        return f"sqlite:///{path}"

    return make
