"""Confidence read from the model's token probabilities instead of from what it writes.

A small model's verbalised confidence is nearly constant (the 1.5B critic wrote one number for
each verdict, whatever the draft), so a threshold on it cannot be tuned. Its token
distribution is not: at the position where a ``Literal`` field's value starts, the probability
mass on each allowed value's first token(s) is the model's own P(value). These helpers read it
from the logprobs a prediction carries (DSPy puts an LM's ``logprobs`` on the prediction when
the call asked for them: the local llama.cpp engine, OpenAI and any server that returns them).

Both adapters' layouts are understood: JSON (``"verdict": "supported"``) and chat markers
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


def _tokens(logprobs: Any) -> list[dict]:
    content = logprobs.get("content") if isinstance(logprobs, dict) else getattr(logprobs, "content", None)
    return [t if isinstance(t, dict) else dict(t) for t in content or []]


def has_logprobs(logprobs: Any) -> bool:
    """Whether a prediction's ``logprobs`` hold any token (an LM that returns none gives None or no content)."""
    return bool(_tokens(logprobs))


def _value_start(text: str, field: str) -> int | None:
    patterns = (rf'"{re.escape(field)}"\s*:\s*"', rf"\[\[ ## {re.escape(field)} ## \]\]\s*")
    for pattern in patterns:
        m = re.search(pattern, text)
        if m:
            return m.end()
    return None


def first_alternatives(logprobs: Any, field: str) -> list[tuple[str, float]] | None:
    """The alternatives the model weighed for the first token of ``field``'s value, as (the text each
    would have written of the value, log-probability), most likely first; None when the logprobs are
    missing or the value cannot be found. The token covering the value's first character may also carry
    text before the value (an opening quote): that lead is cut from each alternative, and an alternative
    that does not start with it wrote no value."""
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
    out = []
    for alt in tok.get("top_logprobs") or []:
        alt = alt if isinstance(alt, dict) else dict(alt)
        alt_text = str(alt.get("token", ""))
        if alt_text.startswith(lead):
            out.append((alt_text[len(lead) :], float(alt["logprob"])))
    return sorted(out, key=lambda a: -a[1])


def choice_probabilities(logprobs: Any, field: str, choices: Sequence[str]) -> dict[str, float] | None:
    """P(choice) for the value of ``field``, renormalised over ``choices``, or None.

    The token covering the value's first character carries the alternatives (:func:`first_alternatives`).
    An alternative counts for a choice when it is a prefix of the choice (or the choice a prefix of it).
    Choices that share a first token split its mass evenly.
    """
    alternatives = first_alternatives(logprobs, field)
    return None if alternatives is None else choice_mass(alternatives, choices)


def choice_mass(alternatives: Sequence[Sequence[Any]], choices: Sequence[str]) -> dict[str, float] | None:
    """P(choice) renormalised over ``choices`` from a value's first-token ``alternatives`` ((text,
    log-probability) pairs), or None when no alternative starts a choice."""
    mass = dict.fromkeys(choices, 0.0)
    for text, logprob in alternatives:
        rest = str(text).strip().strip('"').lower()
        if not rest:
            continue
        hits = [c for c in choices if c.lower().startswith(rest) or rest.startswith(c.lower())]
        for c in hits:
            mass[c] += math.exp(float(logprob)) / len(hits)
    total = sum(mass.values())
    if total <= 1e-6:
        return None
    return {c: m / total for c, m in mass.items()}


def value_logprobs(logprobs: Any, field: str) -> list[float] | None:
    """The log-probabilities of the tokens that write the value of the string ``field`` (from its first
    character to the closing quote, or to the next chat marker), or None when the logprobs are missing or
    the value cannot be found. The generator's answer confidence is read from them."""
    tokens = _tokens(logprobs)
    if not tokens:
        return None
    texts = [str(t.get("token", "")) for t in tokens]
    text = "".join(texts)
    start = _value_start(text, field)
    if start is None:
        return None
    end = _value_end(text, start)
    out, offset = [], 0
    for tok, piece in zip(tokens, texts):
        lo, hi = offset, offset + len(piece)
        offset = hi
        if hi <= start or lo >= end:
            continue
        lp = tok.get("logprob")
        if lp is not None:
            out.append(float(lp))
    return out or None


def _value_end(text: str, start: int) -> int:
    """Where a value that starts at ``start`` ends: its closing (unescaped) quote in JSON, else the next
    chat marker or line end."""
    if start > 0 and text[start - 1] == '"':
        i = start
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == '"':
                return i
            i += 1
        return len(text)
    stop = [i for i in (text.find("[[ ##", start), text.find("\n", start)) if i >= 0]
    return min(stop) if stop else len(text)


def answer_confidence(logprobs: Any, field: str = "answer") -> dict[str, float] | None:
    """The generator's own confidence in the answer it wrote: the mean and the lowest token log-probability
    of the value, and the probability of its first token (None when the logprobs are missing)."""
    lps = value_logprobs(logprobs, field)
    if not lps:
        return None
    return {"mean": sum(lps) / len(lps), "min": min(lps), "first": math.exp(lps[0]), "tokens": float(len(lps))}
