"""What recording will cost, said before it starts, and the guard that stops it (experiments/jobs/estimate.py):
prices from LiteLLM's cost map, read offline."""

from __future__ import annotations

import pytest

from experiments.jobs.estimate import CostGuard, CostLimitError, Estimate, Spent, check_max_cost, price_of
from program.errors import ConfigError

CALLS = {"lm_calls": 2, "cached_calls": 0, "prompt_tokens": 1000, "completion_tokens": 100}


def test_prices_come_from_the_cost_map_a_local_model_costs_time_and_an_unknown_one_is_said():
    priced = price_of("openai/gpt-4o-mini")
    assert priced.known and priced.dollars(1_000_000, 0) == pytest.approx(0.15)
    assert price_of("local/qwen2.5-coder-0.5b").local
    unknown = price_of("openai/my-own-server-model")
    assert not unknown.known and unknown.dollars(10, 10) is None
    with pytest.raises(ConfigError, match="no price for openai/my-own-server-model"):
        check_max_cost(1.0, unknown)
    check_max_cost(1.0, priced)
    with pytest.raises(ConfigError, match="more than 0"):
        check_max_cost(0.0, priced)


def test_the_estimate_scales_the_probe_to_the_questions_left():
    probe = Spent()
    for _ in range(4):
        probe.add({"seconds": 2.0}, CALLS)
    est = Estimate.scale(probe, wall_seconds=4.0, left=100, price=price_of("openai/gpt-4o-mini"), threads=2)
    assert est.lm_calls == 200 and est.prompt_tokens == 100_000 and est.completion_tokens == 10_000
    assert est.seconds == pytest.approx(100.0)  # the probe's wall time a question (on its threads)
    assert est.dollars == pytest.approx(100_000 * 0.15e-6 + 10_000 * 0.6e-6)
    text = " ".join(est.lines())
    assert "to record: 100 questions, about 200 LM calls and 110,000 tokens" in text and "on 2 threads" in text
    assert "money: about $0.0210" in text


def test_calls_answered_from_the_cache_cost_nothing():
    spent = Spent()
    spent.add({"seconds": 0.1}, {**CALLS, "cached_calls": 2})
    assert spent.prompt_tokens == 0 and spent.dollars(price_of("openai/gpt-4o-mini")) == 0.0


def test_the_guard_stops_once_the_limit_is_spent_and_says_how_to_go_on():
    guard = CostGuard(price_of("openai/gpt-4o-mini"), max_cost=0.0005, where="rec.jsonl", command="`sharp build X`")
    guard.add({}, CALLS)  # $0.00021
    guard.add({}, CALLS)
    with pytest.raises(CostLimitError, match=r"stopped by --max-cost \$0.0005: .* kept in rec.jsonl; rerun `sharp"):
        guard.add({}, CALLS)
    CostGuard(price_of("openai/gpt-4o-mini")).add({}, CALLS)  # no limit: never stops
