"""Fixtures shared by every test folder; the doubles themselves live in tests/doubles.py."""

from __future__ import annotations

import socket

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
