"""Turn a model's answer text into a short span suitable for exact match."""

from __future__ import annotations

import re

_YES_NO_START = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|were|am)\b", re.I)
_PREFIXES = re.compile(r"^(the\s+)?(final\s+)?answer\s*(is|:)\s*", re.I)


def is_yes_no_question(question: str) -> bool:
    return bool(_YES_NO_START.match(question.strip()))


def clean_answer(answer: object, question: str = "") -> str:
    """Strip wrappers a small model adds ("Answer: ...", quotes, a trailing period, extra lines).

    For a yes/no question an answer that starts with yes or no becomes exactly that word.
    """
    text = "" if answer is None else str(answer)
    text = text.strip().splitlines()[0].strip() if text.strip() else ""
    text = _PREFIXES.sub("", text).strip()
    text = text.strip(" \"'`*")
    if text.endswith(".") and not re.search(r"\b[A-Z]\.$", text):
        text = text[:-1].rstrip()
    if question and is_yes_no_question(question):
        low = text.lower()
        if low in ("true", "false"):  # the 1.5B model sometimes answers a yes/no question "False"
            return "yes" if low == "true" else "no"
        for word in ("yes", "no"):
            if low == word or low.startswith(word + ",") or low.startswith(word + " "):
                return word
    return text
