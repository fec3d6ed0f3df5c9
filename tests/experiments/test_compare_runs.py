"""The run comparison benchmark: shared questions only, paired differences, cold timing."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks.compare_runs import compare
from optimize.evaluate import cold_figures


def row(qid, em, seconds, cached=0):
    return {
        "id": qid,
        "type": "bridge",
        "em": em,
        "f1": em,
        "seconds": seconds,
        "cached_calls": cached,
        "lm_calls": 1,
        "prompt_tokens": 10,
        "completion_tokens": 1,
        "all_gold": 1.0,
        "recall": 1.0,
        "precision": 0.5,
        "retries": 0,
        "error": None,
        "critic_points": [],
    }


def test_cold_figures_ignore_questions_answered_from_the_cache():
    rows = [row("a", 1, 10.0), row("b", 0, 0.1, cached=2), row("c", 0, 30.0), row("d", 1, 20.0)]
    assert cold_figures(rows) == {
        "cold_n": 3,
        "cold_seconds_per_q": 20.0,
        "cold_seconds_median": 20.0,
        "cold_prompt_tokens_per_q": 10.0,
        "cold_completion_tokens_per_q": 1.0,
    }
    assert cold_figures([row("b", 0, 0.1, cached=1)])["cold_seconds_per_q"] is None


def test_compare_uses_only_shared_questions(tmp_path):
    base = tmp_path / "vanilla-hotpotqa-dev-x.jsonl"
    other = tmp_path / "sharp-hotpotqa-dev-y.jsonl"
    base.write_text("\n".join(json.dumps(r) for r in [row("a", 0, 1.0), row("b", 0, 1.0), row("z", 1, 1.0)]))
    other.write_text("\n".join(json.dumps(r) for r in [row("a", 1, 4.0), row("b", 1, 2.0)]))
    out = compare([base, other])
    assert out["shared_questions"] == 2
    assert out["systems"]["vanilla"]["em"] == 0.0 and out["systems"]["sharp"]["em"] == 1.0
    assert out["systems"]["sharp"]["d_em_vs_vanilla"]["diff"] == pytest.approx(1.0)
    assert out["systems"]["sharp"]["cold_seconds_per_q"] == pytest.approx(3.0)
