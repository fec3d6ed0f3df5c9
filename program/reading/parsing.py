"""Defensive parsing of LM output fields: each helper returns None (or []) for what it cannot read.

A weak model writes "85%", "None", "n/a", a bare string for a list. Every system reads its
graders' and critic's fields through these, so garbage is recorded and bounded, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

_TRIVIAL = {"", "none", "n/a", "na", "nothing", "null", "-", "[]"}
_TRUE = {"true", "yes", "y", "1", "relevant", "supported"}
_FALSE = {"false", "no", "n", "0", "irrelevant", "not relevant", "unsupported", "not supported"}


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().strip(".\"'").lower() if value is not None else ""
    return True if text in _TRUE else False if text in _FALSE else None


def as_score(value: Any) -> float | None:
    """A probability in [0, 1]; a percentage (1 < x <= 100) is divided by 100."""
    if isinstance(value, bool):
        return None
    try:
        x = float(str(value).strip().rstrip("%"))
    except (TypeError, ValueError):
        return None
    if math.isnan(x) or x < 0:
        return None
    if 1.0 < x <= 100.0:
        x /= 100.0
    return x if x <= 1.0 else None


def as_choice(allowed: Sequence[str]) -> Callable[[Any], str | None]:
    def parse(value: Any) -> str | None:
        text = str(value).strip().strip(".\"'").lower().replace(" ", "_") if value is not None else ""
        return text if text in allowed else None

    return parse


def as_text(value: Any) -> str | None:
    text = " ".join(str(value).split()) if value is not None else ""
    return text if text.lower() not in _TRIVIAL else None


def items(values: Any) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [str(v).strip() for v in values if str(v).strip().lower() not in _TRIVIAL | {"no"}]


def salvage_json(raw: str | None) -> dict:
    """The fields of a cut or malformed JSON reply (a weak model looping in a list), or {}: the one
    JSON salvager of the program (the critic's and planner's fields, the generator's answer)."""
    if not raw:
        return {}
    import json_repair

    try:
        value = json_repair.loads(raw[raw.find("{") :] if "{" in raw else raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
