"""Fixtures for the LM tests: a scripted engine, a cold cache (the fake server is in tests/conftest.py), and the
real local model that the local_lm tests share."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from program.lm.cache import cold_cache

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))  # for lm_doubles


@pytest.fixture(autouse=True)
def _cold_dspy_cache(tmp_path):
    """Every LM test starts from an empty DSPy cache of its own (memory only: fast)."""
    with cold_cache(tmp_path / "dspy_cache", disk=False):
        yield


@dataclass(frozen=True)
class LocalModel:
    """The real model of the local_lm tests and the context they all load it with."""

    model: str = "local/smollm2-135m"
    # Every local_lm test's prompt fits (the longest, prefix reuse's four demos, is ~2,200 characters), and a
    # cached prefix state is copied out of a buffer sized by n_ctx: a small context is quicker to save.
    n_ctx: int = 2048

    def spec(self, **settings):
        """An LMSpec of this model and context (``settings``: the rest)."""
        from program.lm import LMSpec

        return LMSpec(model=self.model, n_ctx=self.n_ctx, **settings)


@pytest.fixture(scope="session")
def local_model():
    """One loaded copy of the real model for every local_lm test: program/lm/local.py keeps one session per
    (model, n_ctx, threads), so the tests that build their LMs with these settings load it once; it is
    freed after the last test (a test that needs a cold model clears its cached prefixes, never reloads)."""
    yield LocalModel()
    from program.lm.local import unload_all

    unload_all()
