"""A bridge question as a plan of single hops, and the checks every plan passes (no LM call).

A bridge question asks for a fact about an entity the question only describes ("Where was the director of
film X born?"): the reader, shown both paragraphs at once, answers about the wrong link (the film's place,
the son's university). Asked one link at a time it reads well. A :class:`Plan` is the ordered single-hop
questions of the chain; a later hop names an earlier hop's answer as ``#1``, ``#2`` and :func:`substitute`
writes the answer in before the hop is searched and read.

* :func:`rule_plan`: the plan of a templated question, written by rule from its relations (the director of
  film X, X's father / mother / spouse, a paternal or maternal grandparent, an in-law; then where or when
  they were born or died, were buried, studied or worked, their country, an award), each hop worded as a
  natural question the reader reads well ("Where did X die?", not "What is the place of death of X?").
* :func:`check_plan`: Python's checks of any plan, the planner LM's included: two to four hops, one question
  a hop, hop 1 names no earlier answer, every later hop names an earlier one and none a later one, no hop is
  the question itself. A plan that fails is not run (the draft stands) and the trace says why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

MIN_HOPS, MAX_HOPS = 2, 4
MAX_HOP_WORDS = 30
REF = re.compile(r"#(\d+)")
# a second question inside a hop ("Who directed X? Where was he born?")
_TWO_QUESTIONS = re.compile(
    r"\?\s+(?:who|whom|whose|what|which|where|when|why|how|is|was|are|were|did|does|do)\b", re.I
)


@dataclass(frozen=True)
class Plan:
    """The ordered single-hop questions of a bridge (later hops name earlier answers as #1, #2), who wrote
    them, and, for a rule plan, each hop's relation."""

    hops: tuple[str, ...]
    by: Literal["rule", "planner"]
    relations: tuple[str, ...] = field(default=())
    entity: str | None = None  # a rule plan's starting entity, as the question names it

    def to_record(self) -> dict:
        return {"hops": list(self.hops), "by": self.by, "relations": list(self.relations), "entity": self.entity}

    @classmethod
    def from_record(cls, d: dict) -> Plan:
        return cls(tuple(d["hops"]), d["by"], tuple(d.get("relations") or ()), d.get("entity"))


# ---- checks ------------------------------------------------------------------------------------------
def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s#]", " ", text.lower()).split())


def check_plan(hops: Sequence[str], question: str) -> str | None:
    """Why ``hops`` is not a plan this loop runs for ``question`` (None: it is one)."""
    hops = [str(h).strip() for h in hops]
    if not MIN_HOPS <= len(hops) <= MAX_HOPS:
        return f"{len(hops)} hop(s): a chain has {MIN_HOPS} to {MAX_HOPS}"
    asked = _norm(question)
    for i, hop in enumerate(hops, 1):
        if not hop:
            return f"hop {i} is empty"
        if len(hop.split()) > MAX_HOP_WORDS:
            return f"hop {i} has {len(hop.split())} words (at most {MAX_HOP_WORDS}): not one fact"
        if _TWO_QUESTIONS.search(hop):
            return f"hop {i} asks two questions: one a hop"
        if _norm(hop) == asked:
            return f"hop {i} repeats the question"
        refs = {int(n) for n in REF.findall(hop)}
        if i == 1 and refs:
            return "hop 1 names an earlier answer (#n): it must start from what the question names"
        if i > 1 and not refs:
            return f"hop {i} names no earlier answer (#1 .. #{i - 1}): not a chain"
        if any(n < 1 or n >= i for n in refs):
            return f"hop {i} names #{max(refs)}, not an earlier hop's answer"
    if len({_norm(h) for h in hops}) != len(hops):
        return "two hops ask the same"
    return None


def substitute(hop: str, answers: Sequence[str]) -> str:
    """``hop`` with #1, #2 ... replaced by the earlier hops' answers (a checked plan names only those)."""
    return REF.sub(lambda m: answers[int(m.group(1)) - 1], hop)


def loops_back(answer: str, hop_question: str, entity: str | None = None) -> bool:
    """Whether a hop's ``answer`` goes round in a loop: it is the entity the hop asks about (``entity``: the
    earlier answer written in, or the entity a rule plan starts from), or, asked for a person, a part of that
    entity's name or of the hop's question ("Who was the father of Alessandro Ruspoli, 2nd Prince?" answered
    "Alessandro Ruspoli"). A place named in the question is no loop ("Where was Vladimir of Staritsa born?":
    "Staritsa")."""
    a = _norm(answer)
    if not a:
        return False
    if entity is not None and a == _norm(entity):
        return True
    if not _PERSON_HOP.match(hop_question.strip()):
        return False
    within = _norm(entity) if entity is not None else _norm(hop_question)
    return f" {a} " in f" {within} "


# a hop that asks for a person (a relation: who directed, whose father)
_PERSON_HOP = re.compile(r"^(?:who|whom|whose)\b", re.I)


_REWORD = (
    (re.compile(r"^where was (.+) born\?$", re.I), "In which city was {} born?"),
    (re.compile(r"^where did (.+) die\?$", re.I), "In which city did {} die?"),
    (re.compile(r"^where was (.+) buried\?$", re.I), "In which place was {} buried?"),
)


def reworded(hop_question: str) -> str | None:
    """A place hop asked for the kind of place it wants ("Where was X born?" -> "In which city was X born?"),
    for a reader that answered it with a date; None for other hops."""
    for pattern, template in _REWORD:
        m = pattern.match(hop_question.strip())
        if m:
            return template.format(m.group(1))
    return None


# ---- plans by rule ---------------------------------------------------------------------------------------
# a relation from a person or a work to a person: the hop question (E: the entity, or #n), by the word the
# question uses for the kind of work ("film", "song") where it names one
_TO_PERSON = {
    "director": "Who directed {kind}{e}?",
    "performer": "Who performed {kind}{e}?",
    "composer": "Who composed the music of {kind}{e}?",
    "producer": "Who produced {kind}{e}?",
    "founder": "Who founded {kind}{e}?",
    "creator": "Who created {kind}{e}?",
    "publisher": "Who published {kind}{e}?",
    "presenter": "Who presented {kind}{e}?",
    "author": "Who wrote {kind}{e}?",
    "writer": "Who wrote {kind}{e}?",
    "screenwriter": "Who wrote the screenplay of {kind}{e}?",
    "editor": "Who edited {kind}{e}?",
    "father": "Who was the father of {e}?",
    "mother": "Who was the mother of {e}?",
    "spouse": "Who was the spouse of {e}?",
    "husband": "Who was the husband of {e}?",
    "wife": "Who was the wife of {e}?",
    "child": "Who was the child of {e}?",
    "son": "Who was the son of {e}?",
    "daughter": "Who was the daughter of {e}?",
}
# a fact about a person: the hop question that asks it
_FACT = {
    "place of birth": "Where was {e} born?",
    "date of birth": "When was {e} born?",
    "place of death": "Where did {e} die?",
    "date of death": "When did {e} die?",
    "cause of death": "What was the cause of death of {e}?",
    "place of burial": "Where was {e} buried?",
    "educated at": "Where did {e} study?",
    "employer": "Where did {e} work?",
    "country of citizenship": "Which country was {e} from?",
    "nationality": "What nationality was {e}?",
    "award received": "What award did {e} receive?",
}
# kinship words that are two links
_COMPOUND = {
    "paternal grandfather": ("father", "father"),
    "paternal grandmother": ("father", "mother"),
    "maternal grandfather": ("mother", "father"),
    "maternal grandmother": ("mother", "mother"),
    "father-in-law": ("spouse", "father"),
    "mother-in-law": ("spouse", "mother"),
    "stepfather": ("mother", "spouse"),
    "stepmother": ("father", "spouse"),
    "grandchild": ("child", "child"),
    "child-in-law": ("child", "spouse"),
}
_KIN = "|".join(sorted({*_COMPOUND, "father", "mother", "husband", "wife", "spouse", "child", "son", "daughter"},
                       key=len, reverse=True))  # fmt: skip
_WORK_ROLE = (
    "director|performer|composer|producer|founder|creator|publisher|presenter|author|writer|screenwriter|editor"
)
_KIND = r"film|movie|song|album|book|novel|band|group|series|tv series|show|play|opera|company|magazine|newspaper"

# "the director of film X", "the composer of song X", "the founder of X"
_ROLE_OF = re.compile(rf"^(?:the )?({_WORK_ROLE}) of (?:the )?(?:({_KIND}) )?(.+)$", re.I)
# "the father of X", "the paternal grandfather of X"
_KIN_OF = re.compile(rf"^the ({_KIN}) of (.+)$", re.I)
# "X's father", "X's maternal grandmother"
_POSSESSIVE = re.compile(rf"^(.+?)['’]s ({_KIN})$", re.I)

# the question's frame: (pattern with the person phrase as group "p", the fact it asks, or None: a relation
# named in the pattern as group "rel")
_FRAMES: tuple[tuple[re.Pattern[str], str | None], ...] = tuple(
    (re.compile(p, re.I), fact)
    for p, fact in (
        (r"^where was (?P<p>.+) born$", "place of birth"),
        (r"^when was (?P<p>.+) born$", "date of birth"),
        (r"^when is (?P<p>.+?) ?['’]s birthday$", "date of birth"),
        (r"^where did (?P<p>.+) die$", "place of death"),
        (r"^when did (?P<p>.+) die$", "date of death"),
        (r"^why did (?P<p>.+) die$", "cause of death"),
        (r"^where (?:was|is) (?P<p>.+) buried$", "place of burial"),
        (r"^where did (?P<p>.+) (?:study|graduate from|go to school|get (?:his|her) education)$", "educated at"),
        (r"^where (?:does|did) (?P<p>.+) work(?: at)?$", "employer"),
        (r"^what nationality (?:is|was) (?P<p>.+)$", "nationality"),
        (r"^which country (?P<p>.+) (?:is|was) from$", "country of citizenship"),
        (
            r"^(?:which|what) award (?:did )?(?P<p>.+) (?:receive|received|earn|earned|win|won|get|got)$",
            "award received",
        ),
        (r"^what is the award that (?P<p>.+) (?:received|earned|won|got)$", "award received"),
        (r"^(?:what|where) (?:is|was) the place of birth of (?P<p>.+)$", "place of birth"),
        (r"^(?:what|when) (?:is|was) the date of birth of (?P<p>.+)$", "date of birth"),
        (r"^(?:what|where) (?:is|was) the place of death of (?P<p>.+)$", "place of death"),
        (r"^(?:what|when) (?:is|was) the date of death of (?P<p>.+)$", "date of death"),
        (r"^(?:what|where) (?:is|was) the place of burial of (?P<p>.+)$", "place of burial"),
        (r"^what (?:is|was) the cause of death of (?P<p>.+)$", "cause of death"),
        (r"^what (?:is|was) the nationality of (?P<p>.+)$", "nationality"),
        (rf"^who (?:is|was) the (?P<rel>{_KIN}) of (?P<p>.+)$", None),
        (rf"^who (?:is|was) (?P<p>.+?)['’]s (?P<rel>{_KIN})$", None),
    )
)
_REL_WORD = {"husband": "spouse", "wife": "spouse"}


def _links(phrase: str) -> tuple[str, list[tuple[str, str]]] | None:
    """A person phrase as (the entity it starts from, its relations from there outwards with the kind of
    work each names), e.g. "the director of film X" -> ("X", [("director", "film ")]); None when the phrase
    names no relation (it is the entity itself)."""
    phrase = phrase.strip()
    for pattern in (_ROLE_OF, _KIN_OF, _POSSESSIVE):
        m = pattern.match(phrase)
        if not m:
            continue
        if pattern is _ROLE_OF:
            rel, kind, inner = m.group(1).lower(), (m.group(2) or "").lower(), m.group(3)
        elif pattern is _KIN_OF:
            rel, kind, inner = m.group(1).lower(), "", m.group(2)
        else:
            inner, rel, kind = m.group(1), m.group(2).lower(), ""
        deeper = _links(inner)
        entity, chain = deeper if deeper is not None else (inner.strip(), [])
        steps = [(r, "") for r in _COMPOUND[rel]] if rel in _COMPOUND else [(rel, f"the {kind} " if kind else "")]
        return entity, [*chain, *steps]
    return None


def rule_plan(question: str) -> Plan | None:
    """The plan of a templated bridge question, by rule (None: no template fits, or it is one hop)."""
    q = " ".join(question.split()).rstrip(" ?.!")
    for pattern, fact in _FRAMES:
        m = pattern.match(q)
        if not m:
            continue
        found = _links(m.group("p"))
        rel = (m.groupdict().get("rel") or "").lower() or None
        if found is None and rel is None:
            return None
        entity, chain = found if found is not None else (m.group("p").strip(), [])
        if rel is not None:
            chain = [*chain, *((r, "") for r in _COMPOUND.get(rel, (rel,)))]
        if not entity or any(r not in _TO_PERSON for r, _ in chain):
            return None
        hops, relations = [], []
        for i, (r, kind) in enumerate(chain):
            e = entity if i == 0 else f"#{i}"
            hops.append(_TO_PERSON[r].format(e=e, kind=kind if i == 0 else ""))
            relations.append(_REL_WORD.get(r, r))
        if fact is not None:
            hops.append(_FACT[fact].format(e=f"#{len(chain)}" if chain else entity))
            relations.append(fact)
        if not MIN_HOPS <= len(hops) <= MAX_HOPS:
            return None
        return Plan(tuple(hops), "rule", tuple(relations), entity)
    return None
