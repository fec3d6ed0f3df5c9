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
from functools import lru_cache
from typing import Literal

from program.reading.answers import is_yes_no_question

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
    return list(_options(question))


@lru_cache(maxsize=65536)  # replay asks it of the same questions under every policy a search tries
def _options(question: str) -> tuple[str, ...]:
    q = re.sub(r"^q:\s*", "", " ".join(question.split()), flags=re.I).rstrip(" ?.!")
    for pattern in (_BETWEEN, _WAS_OR):
        m = pattern.match(q)
        if m:
            return tuple(_pair(m.group(1), m.group(2)))
    if not _CHOICE_LEAD.match(q):
        return ()
    m = _OUT_OF.search(q)
    if m:
        return tuple(_pair(m.group(1), m.group(2)))
    if is_yes_no_question(q):
        return ()
    parts = list(_OR.finditer(q))
    if not parts and _COMPARE_WORDS.search(q):  # "Which genus has more species, A and B?"
        parts = [m for m in _AND.finditer(q) if "," in q[: m.start()]][-1:]
    if not parts:
        return ()
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
            return ()
        first = before[m.end() :]
    return tuple(_pair(first, after))


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


# ---- per-option checks, written when the planner could not plan a choice ----------------------------------
# the word that starts what a choice says of its answer ("Which dog IS native to France"): a verb or an
# adverb before one; a word of the noun before it ("Which genus of plant") is not
_PREDICATE_START = re.compile(
    r"^(is|was|are|were|has|had|have|did|does|do|can|could|will|would|still|also|first|once|originally|"
    r"wrote|won|became|began|made|played|sang|starred|directed|produced|founded|released|"
    r"\w+ed|\w+[^s]s)$",
    re.I,
)
_VERB_ONLY = re.compile(r"^(is|was|are|were|has|had|have|did|does|do|can|could|will|would|still|also)$", re.I)
# "more species": a count to read per option ("How many species does X have?")
_MORE_OF = re.compile(r"\b(?:more|fewer|most|fewest)\s+([a-z]+s)\b", re.I)
# a comparative or a superlative: what a yes/no check of one option cannot answer ("Is A busier?")
_RANKS = re.compile(
    r"\b(first|earlier|earliest|later|latest|last|older|oldest|younger|youngest|elder|sooner|recently|newer|newest|"
    r"more|most|fewer|fewest|less|least|\w+er than|larger|largest|bigger|biggest|smaller|smallest|greater|greatest|"
    r"higher|highest|lower|lowest|taller|tallest|shorter|shortest|longer|longest|further|furthest|farther|"
    r"farthest|busier|busiest|closer|closest|better|best|worse|worst|heavier|heaviest|wider|widest)\b",
    re.I,
)
_NOT_COUNTED = {"times", "likely", "famous", "is", "was", "has", "series", "news"}


def _without_options(question: str, opts: list[str]) -> str | None:
    """The choice question with its options cut out ("Which dog, A or B, is native to France?" -> "Which
    dog is native to France"), or None where an option is not written in it."""
    q = " ".join(question.split()).rstrip(" ?.!")
    low = q.lower()
    first, second = low.find(opts[0].lower()), low.rfind(opts[1].lower())
    if first < 0 or second < first:
        return None
    q = q[:first] + " " + q[second + len(opts[1]) :]
    q = re.sub(r"\b(between|either|of|out of|among)\s*$", " ", q[: first + 1].rstrip(), flags=re.I) + q[first + 1 :]
    q = re.sub(r"\s*[,:;]\s*(?=[,:;]|$)", "", q.strip())
    q = re.sub(r"^[\s,:;]+|[\s,:;]+$", "", q)
    return " ".join(re.sub(r"\s+([,:;])", r"\1", re.sub(r"([,:;])\s*[,:;]", r"\1", q)).split()).strip(" ,:;")


def rule_checks(question: str, opts: list[str] | None = None) -> list[str] | None:
    """One single-hop question per option of a choice the planner did not plan, written from the question:
    a choice of what is true of one option becomes a yes/no check each ("Which dog is native to France, A or
    B?" -> ["Is it true that A is native to France?", ...]: code picks the option read more surely "yes"); a
    choice of the one with more of a counted thing becomes a count each ("Which genus has more species, A or
    B?" -> ["How many species does A have?", ...]). None when the question is neither (the draft stands)."""
    opts = options(question) if opts is None else opts
    if len(opts) != 2:
        return None
    rest = _without_options(question, opts)
    if not rest:
        return None
    more = _MORE_OF.search(rest)
    if more and more.group(1).lower() not in _NOT_COUNTED:
        return [f"How many {more.group(1).lower()} does {x} have?" for x in opts]
    if _RANKS.search(rest):  # "which is bigger": a comparison, not a check
        return None
    m = re.match(r"^(?:which|who|what)\b\s*(.*)$", re.sub(r"^[\s,]*(?:between\s*,?\s*)?", "", rest), re.I)
    if not m:
        return None
    words_ = m.group(1).replace(",", " ").split()
    for i, word in enumerate(words_[:5]):
        if (_VERB_ONLY if i == 0 else _PREDICATE_START).match(word) and (i == 0 or words_[i - 1].lower() != "of"):
            predicate = " ".join(words_[i:])
            if len(words_) - i < 2:
                return None
            return [f"Is it true that {x} {predicate}?" for x in opts]
    return None
