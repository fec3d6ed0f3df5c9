"""Fixtures for the LM tests: a scripted engine, a cold cache (the fake server is in tests/conftest.py)."""

from __future__ import annotations

import sys

import pytest

from program.lm.cache import cold_cache

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))  # for lm_doubles


@pytest.fixture(autouse=True)
def _cold_dspy_cache(tmp_path):
    """Every LM test starts from an empty DSPy cache of its own (memory only: fast)."""
    with cold_cache(tmp_path / "dspy_cache", disk=False):
        yield
