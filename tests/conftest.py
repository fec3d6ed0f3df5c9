"""Fixtures shared by every test folder; the doubles themselves live in tests/doubles.py."""

from __future__ import annotations

import dspy
import pytest
from doubles import KeywordRetriever


@pytest.fixture
def retriever() -> KeywordRetriever:
    return KeywordRetriever()


@pytest.fixture(autouse=True)
def _no_global_lm():
    """No test may reach a real LM by accident through dspy's global settings."""
    with dspy.context(lm=None):
        yield
