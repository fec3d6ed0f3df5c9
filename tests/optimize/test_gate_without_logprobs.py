"""The gate of a model that writes no token log-probabilities: fitted on the features that remain, and the report
says so (optimize/gate_fitting.py); nothing reads the stand-in confidences as if the model had written them."""

from __future__ import annotations

import random

from optimize.gate_fitting import (
    LOGPROB_FEATURES,
    fit_answer_critic,
    has_logprobs,
    without_logprobs,
)
from program.sharp.gate import GATE_FEATURES, MISSING_LOGPROB


def cases(n: int, logprobs: bool, seed: int = 0) -> list[dict]:
    """Rounds whose answer is right where it is a span of a cited passage of the right type (and, with
    log-probabilities, where the reader was sure)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        right = rng.random() < 0.5
        features = dict.fromkeys(GATE_FEATURES, 0.0)
        noisy = right if rng.random() < 0.85 else not right
        features.update(in_cited=float(noisy), type_mismatch=float(not noisy and rng.random() < 0.5))
        if logprobs:
            features.update(
                lp_mean=-0.1 if right else -1.5, lp_min=-0.2 if right else -2.0, p_first=0.9, lp_missing=0.0
            )
        else:
            features.update(lp_mean=MISSING_LOGPROB, lp_min=MISSING_LOGPROB, p_first=0.6, lp_missing=1.0)
        out.append({"question_id": f"q{i}", "features": features, "critic": None, "critic_problem": None,
                    "label": right, "action": "draft", "form": "bridge"})  # fmt: skip
    return out


def test_without_log_probabilities_the_gate_reads_what_remains_and_says_so():
    fit, held = cases(60, logprobs=False), cases(30, logprobs=False, seed=1)
    assert not has_logprobs(fit)
    fitted = fit_answer_critic(fit, held)
    features = set(fitted["gate"].features)
    assert features and not features & set(LOGPROB_FEATURES)
    assert all(not set(row["features"]) & set(LOGPROB_FEATURES) for row in fitted["report"]["selection"])
    assert fitted["report"]["logprobs"] is False and "generator_confidence" not in fitted["report"]
    assert fitted["report"]["gate"]["auroc"] > 0.7  # what remains still separates right from wrong


def test_with_log_probabilities_a_round_s_confidence_counts():
    assert has_logprobs(cases(10, logprobs=True))
    mixed = cases(10, logprobs=False) + cases(1, logprobs=True)
    assert has_logprobs(mixed)  # one round read with them: the confidence features stay candidates


def test_candidates_without_log_probabilities_drop_empty_and_repeated_sets():
    kept = without_logprobs((("lp_mean", "p_first"), ("lp_mean", "in_cited"), ("in_cited",), ("yes_margin",)))
    assert kept == (("in_cited",),)
