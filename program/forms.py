"""A question's form, read from its text alone (no LM call): what the loop's repairs and the critic's
features key on.

* ``yesno``: a question that asks for "yes" or "no" ("Are both X and Y ...?", "Is X ...?").
* ``comparison``: a choice between named options ("Who was born first, A or B?", "Which film came out
  first, X or Y?"); :func:`options` returns the options, one of which the answer must be.
* ``bridge``: everything else (a chain of facts through an intermediate entity, or a single fact).

Comparisons and yes/no questions get the decomposed read (one sub-question per entity, the answer decided
from the values read); the forms are also features of the answer critic (a comparison answered with none
of its options is wrong whatever the model's confidence).
"""

from __future__ import annotations

import re
from typing import Literal

from program.answers import is_yes_no_question

Form = Literal["bridge", "comparison", "yesno"]
FORMS: tuple[Form, ...] = ("bridge", "comparison", "yesno")

# "..., A or B?" / "... A or B?" : the last clause holds the two options; the first option starts after
# the last comma before the "or" (or after a colon), else after a verb-like lead-in word.
_OR = re.compile(r"\bor\b", re.I)
_AND = re.compile(r"\band\b", re.I)
_CHOICE_LEAD = re.compile(
    r"^(which|who|whom|whose|what|where|when)\b", re.I
)  # questions that pick one of their named options
_LEAD_IN = re.compile(
    r".*\b(between|first|earlier|later|older|younger|more|less|larger|smaller|bigger|longer|shorter|"
    r"higher|lower|taller|closer|further|farther|faster|slower|newer|recently|last|last,|most|least)\b[:,]?\s*",
    re.I,
)


# "Between A and B, who ...", "In between A and B which ...", "Who was born first out of A and B?"
_BETWEEN = re.compile(r"^(?:in\s+)?between\s+(.+?)\s+and\s+(.+?)\s*,?\s+(?:which|who|whose|what)\b", re.I)
_OUT_OF = re.compile(r"\b(?:out of|among|amongst)\s+(.+?)\s+and\s+(.+)$", re.I)
# "Was A or B born first?": a choice written as a yes/no question
_WAS_OR = re.compile(r"^(?:was|is|were|are|did|does)\s+(.+?)\s+or\s+(.+?)\s+(?:born|founded|released|formed|"
                     r"established|published|created|made|older|younger)\b", re.I)  # fmt: skip


def options(question: str) -> list[str]:
    """The two named options of a choice question ("Who was born first, A or B?" -> [A, B]), or []."""
    q = re.sub(r"^q:\s*", "", " ".join(question.split()), flags=re.I).rstrip(" ?.!")
    for pattern in (_BETWEEN, _WAS_OR):
        m = pattern.match(q)
        if m:
            return _pair(m.group(1), m.group(2))
    if not _CHOICE_LEAD.match(q):
        return []
    m = _OUT_OF.search(q)
    if m:
        return _pair(m.group(1), m.group(2))
    if is_yes_no_question(q):
        return []
    parts = list(_OR.finditer(q))
    if not parts and _COMPARE_WORDS.search(q):  # "Which genus has more species, A and B?"
        parts = [m for m in _AND.finditer(q) if "," in q[: m.start()]][-1:]
    if not parts:
        return []
    cut = parts[-1]
    before, after = q[: cut.start()].rstrip(" ,"), q[cut.end() :].strip(" ,")
    # "Which director, A or B, was born in Poland?": B ends at the comma the sentence goes on after (a
    # lowercase word); "..., A or The Actress, The Dollars And The Transylvanians?" keeps its comma
    if "," in before and re.search(r",\s+[a-z]", after):
        after = re.split(r",\s+(?=[a-z])", after, maxsplit=1)[0]
    if "," in before:
        first = before.rsplit(",", 1)[1]
    elif ":" in before:
        first = before.rsplit(":", 1)[1]
    else:
        m = _LEAD_IN.match(before)
        if not m:
            return []
        first = before[m.end() :]
    return _pair(first, after)


def _pair(first: str, second: str) -> list[str]:
    first, second = _strip(first), _strip(second)
    if not first or not second or len(first.split()) > 12 or len(second.split()) > 12:
        return []
    return [first, second]


def _strip(text: str) -> str:
    text = text.strip(" ,:;\"'")
    text = re.sub(
        r"^(the (film|movie|song|album|band|book|novel|magazine|company|city|town)s?\s+)", "", text, flags=re.I
    )
    text = re.sub(r"^(between|either)\s+", "", text, flags=re.I)
    return text.strip(" ,:;\"'")


_COMPARE_WORDS = re.compile(
    r"\b(both|same|either|neither|first|earlier|later|older|younger|more|fewer|less|larger|smaller|bigger|"
    r"longer|shorter|higher|lower|taller|earliest|latest|oldest|youngest)\b",
    re.I,
)


def question_form(question: str) -> Form:
    """``yesno``, ``comparison`` or ``bridge`` (see the module docstring)."""
    opts = options(question)
    if is_yes_no_question(question) and not opts:
        return "yesno"
    if opts or (_OR.search(question) and _COMPARE_WORDS.search(question)):
        return "comparison"
    return "bridge"


def matches_option(answer: str, opts: list[str]) -> bool:
    """Whether ``answer`` names one of ``opts`` (either contains the other, case and punctuation aside)."""
    a = _norm(answer)
    return bool(a) and any((o := _norm(opt)) and (a in o or o in a) for opt in opts)


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


# the value a choice compares, read from the question once its options are cut out: (pattern, sub-question)
_THROUGH = re.compile(r"\b(whose directors?|the directors?|directors? who)\b", re.I)
# a choice of two dates says which comes first: "born in Poland" names no date to compare
_WHEN = re.compile(
    r"\b(earlier|earliest|later|latest|first|last|older|oldest|younger|youngest|elder|before|after|sooner|"
    r"recently|recent|newer|newest)\b",
    re.I,
)
_VALUE_OF: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"\b(died|die|death)\b", re.I), "When did {of}{x} die?"),
    (re.compile(r"\bborn\b", re.I), "When was {of}{x} born?"),
    # "older" is a birth only of a person: "Who is older", a film's director; a thing's age is the planner's
    (re.compile(r"^\s*who\b.*\b(older|younger|oldest|youngest|elder)\b|\b(director)\b.*\b(older|younger)\b", re.I),
     "When was {of}{x} born?"),
    (re.compile(r"\b(released|came out|come out|published|premiered|aired)\b", re.I), "When was {of}{x} released?"),
    (re.compile(r"\b(established|founded|formed|started|launched|opened|built|created)\b", re.I),
     "When was {of}{x} founded?"),
)  # fmt: skip


def rule_sub_questions(question: str, opts: list[str] | None = None) -> list[str] | None:
    """One single-hop question per option of a choice that compares a date the question names (born, died,
    released, founded; through the options' director where it says so): "Which film has the director who
    died later, A or B?" -> ["When did the director of A die?", "When did the director of B die?"]. None when
    the question is not such a choice (the planner writes its sub-questions then)."""
    opts = options(question) if opts is None else opts
    if len(opts) != 2:
        return None
    frame = question
    for opt in opts:
        frame = frame.replace(opt, " ")
    if not _WHEN.search(frame):
        return None
    of = "the director of " if _THROUGH.search(frame) else ""
    for pattern, template in _VALUE_OF:
        if pattern.search(frame):
            return [template.format(of=of, x=opt) for opt in opts]
    return None
