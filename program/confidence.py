"""Confidence read from the model's token probabilities instead of from what it writes.

A small model's verbalised confidence is nearly constant (the 1.5B critic wrote 0.0 on every
"insufficient" and 0.9 on every "sufficient"), so a threshold on it cannot be tuned. Its token
distribution is not: at the position where a ``Literal`` field's value starts, the probability
mass on each allowed value's first token(s) is the model's own P(value). These helpers read it
from the logprobs a prediction carries (DSPy puts an LM's ``logprobs`` on the prediction when
the call asked for them: the local llama.cpp engine, OpenAI and any server that returns them).

Both adapters' layouts are understood: JSON (``"verdict": "sufficient"``) and chat markers
(``[[ ## verdict ## ]]`` then the value). Anything unreadable gives None, and the caller keeps
the verbal confidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

# top alternatives asked for per generated token: enough to hold every first token of a choice
TOP_LOGPROBS = 10
# P(sufficient) of a discarded critique (unreadable, invalid or inconsistent fields): unknown, so a coin
# flip for the metrics. It is recorded as "insufficient, 0.0" and the loop retries on it, but read
# verbally that pair means "certainly sufficient" (P = 1.0), the opposite of what the program did.
UNKNOWN_P_SUFFICIENT = 0.5
# SHARP's default stop threshold on P(sufficient) (experiments/RESULTS.md, 'Critic discrimination').
DEFAULT_CONFIDENCE_THRESHOLD = 0.35


def verbal_p_sufficient(verdict: str, confidence: float) -> float:
    """P(sufficient) from what the critic wrote: its confidence in "sufficient", else the rest."""
    return confidence if verdict == "sufficient" else 1.0 - confidence


def _tokens(logprobs: Any) -> list[dict]:
    content = logprobs.get("content") if isinstance(logprobs, dict) else getattr(logprobs, "content", None)
    return [t if isinstance(t, dict) else dict(t) for t in content or []]


def _value_start(text: str, field: str) -> int | None:
    patterns = (rf'"{re.escape(field)}"\s*:\s*"', rf"\[\[ ## {re.escape(field)} ## \]\]\s*")
    for pattern in patterns:
        m = re.search(pattern, text)
        if m:
            return m.end()
    return None


def choice_probabilities(logprobs: Any, field: str, choices: Sequence[str]) -> dict[str, float] | None:
    """P(choice) for the value of ``field``, renormalised over ``choices``, or None.

    The token covering the value's first character carries the alternatives. An alternative
    counts for a choice when, after the text the token shares with what came before the value,
    it is a prefix of the choice (or the choice a prefix of it). Choices that share a first token
    split its mass evenly.
    """
    tokens = _tokens(logprobs)
    if not tokens:
        return None
    texts = [str(t.get("token", "")) for t in tokens]
    start = _value_start("".join(texts), field)
    if start is None:
        return None
    offset = 0
    for tok, text in zip(tokens, texts):  # noqa: B007 - tok is read after the loop
        if offset + len(text) > start:
            break
        offset += len(text)
    else:
        return None
    lead = text[: start - offset]  # the part of this token that comes before the value
    mass = dict.fromkeys(choices, 0.0)
    for alt in tok.get("top_logprobs") or []:
        alt = alt if isinstance(alt, dict) else dict(alt)
        alt_text = str(alt.get("token", ""))
        if not alt_text.startswith(lead):
            continue
        rest = alt_text[len(lead) :].strip().strip('"').lower()
        if not rest:
            continue
        hits = [c for c in choices if c.lower().startswith(rest) or rest.startswith(c.lower())]
        for c in hits:
            mass[c] += math.exp(float(alt["logprob"])) / len(hits)
    total = sum(mass.values())
    if total <= 1e-6:
        return None
    return {c: m / total for c, m in mass.items()}
