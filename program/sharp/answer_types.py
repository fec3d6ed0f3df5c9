"""What a question asks for, and whether an answer is that kind of thing (no LM call).

The reader answers bridge questions with the wrong kind of thing: "what role" with the actor, "in which
series" with the character, "what year" with a name. :func:`asked_type` reads the kind a question asks for
from its wording, :func:`answer_type` the kind an answer is from its form, and :func:`mismatch` says when
they disagree: a feature of the answer critic and the trigger of the focused read (program/sharp/loop.py).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from program.reading.answers import is_yes_no_question
from program.sharp.values import parse_value

Asked = Literal["yesno", "date", "number", "person", "place", "other"]

# a question asks for its kind of answer where its wh-phrase stands: first ("When was ..."), or later on, in
# the long questions HotpotQA writes ("..., whose career began when?", "... a chain that operated how many ...")
_DATE = re.compile(r"\b(what year|which year|in what year|in which year|what date|on what date|what decade|"
                   r"which decade|what century|in what century)\b|^when\b|\bwhen\s*\?$", re.I)  # fmt: skip
_NUMBER = re.compile(r"\b(how many|how much|how long|how old|how tall|how far|how big|how large|how high|"
                     r"what percentage|what is the population|what was the population|what number|"
                     r"how any|inhabitants?|population)\b", re.I)  # fmt: skip
_PERSON = re.compile(r"^(who|whom|whose|which (person|man|woman|actor|actress|singer|author|writer|director|"
                     r"player|artist|musician|politician|president|king|queen))\b", re.I)  # fmt: skip
_PLACE = re.compile(r"^where\b|\b(in which (city|country|state|town|county|region|province)|which (city|country|"
                    r"state|town|county|region|province)|what (city|country|state|town|county|region|province))\b",
                    re.I)  # fmt: skip


def asked_type(question: str) -> Asked:
    """The kind of answer ``question`` asks for, from its wh-phrase."""
    q = " ".join(question.split())
    if is_yes_no_question(q):
        return "yesno"
    for pattern, kind in ((_DATE, "date"), (_NUMBER, "number"), (_PERSON, "person"), (_PLACE, "place")):
        if pattern.search(q):
            return kind  # type: ignore[return-value]
    return "other"


def answer_type(answer: str) -> str:
    """The kind an answer is from its form: yesno, date, number, none, name (capitalised words) or phrase."""
    value = parse_value(answer)
    if value.kind in ("yesno", "date", "number", "none"):
        return value.kind
    first = answer.strip()[:1]
    return "name" if first.isupper() else "phrase"


@lru_cache(maxsize=65536)
def mismatch(question: str, answer: str) -> bool:
    """Whether the answer is plainly not the kind of thing the question asks for (a name for "what year", a
    date for "who", a yes/no for anything but a yes/no question)."""
    asked, got = asked_type(question), answer_type(answer)
    if got == "none":
        return False
    if asked == "yesno":
        return got != "yesno"
    if got == "yesno":
        return True
    if asked == "date":
        return got not in ("date", "number")
    if asked == "number":
        return got not in ("number", "date")
    if asked in ("person", "place"):
        return got in ("date", "number")
    return False
