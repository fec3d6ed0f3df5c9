"""A round of SHARP's loop as one typed record, and where rounds come from.

A :class:`Round` holds what one action *read* (the LM's outputs: recorded once) and what the loop *decided*
from it (the answer as code settles it, the critic's features, P(right)). Decisions are recomputed from the
reads by the same functions live and in replay (program/sharp/loop.py), so a new rule over recorded reads costs
no model call.

A :class:`RoundSource` answers an action for a question: the program itself, calling the LM
(:class:`program.sharp.module.SharpRAG`), or a recording looked up by action (:class:`RecordedRounds`). The loop
(:func:`program.sharp.loop.play`) does not know which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from program.errors import SharpError
from program.lm.accounting import CallRecord
from program.reading.confidence import choice_mass
from program.sharp.forms import Form
from program.tracing import Tracer
from program.types import Passage

Action = Literal["draft", "retrieve", "compare", "focus", "chain"]
ACTIONS: tuple[Action, ...] = ("draft", "retrieve", "compare", "focus", "chain")
# the repairs a question of each form can get (a recording in explore mode holds them all)
REPAIRS_FOR: dict[str, tuple[Action, ...]] = {
    "bridge": ("focus", "retrieve", "chain"),
    "comparison": ("compare", "retrieve"),
    "yesno": ("compare", "retrieve"),
}
FORMAT = 4  # 4: typed rounds (draft, retrieve, compare, focus, chain), reads only; decisions are recomputed


class ReplayError(SharpError):
    """A recording cannot answer what the loop asks of it (a round or a critique it did not record, an
    older format)."""


@dataclass
class Read:
    """One reader call: the question it answered, the passages it read and what it wrote."""

    question: str
    answer: str  # cleaned; "unknown" when the reply held nothing usable
    evidence: list[Passage] = field(default_factory=list)
    cited_ids: list[str] = field(default_factory=list)
    confidence: dict[str, float] | None = None  # the answer tokens' (program.reading.confidence.answer_confidence)
    top: list[tuple[str, float]] | None = None  # the alternatives weighed for the answer's first token

    @property
    def p_yes(self) -> float | None:
        """P("yes") against P("no") at the answer's first token, or None (no log-probabilities, or neither
        word among the alternatives)."""
        found = choice_mass(self.top, ("yes", "no")) if self.top else None
        return None if found is None else found["yes"]

    def to_record(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "evidence": [_plain(p) for p in self.evidence],
            "cited_ids": list(self.cited_ids),
            "confidence": self.confidence,
            "top": [list(t) for t in self.top] if self.top is not None else None,
        }

    @classmethod
    def from_record(cls, d: dict, passages: PassageLookup) -> Read:
        return cls(
            question=d["question"],
            answer=d["answer"],
            evidence=passages(d["evidence"]),
            cited_ids=list(d["cited_ids"]),
            confidence=d.get("confidence"),
            top=[(str(t), float(lp)) for t, lp in d["top"]] if d.get("top") is not None else None,
        )


@dataclass
class Round:
    """One action's reads and, once judged, the loop's decisions about them."""

    action: Action
    # ---- read (recorded) ----
    # the reader's answer (draft, retrieve, focus), the composer's (compare) or, for a chain, the read of the
    # question over the union of its hops' passages (where a policy answers so)
    read: Read | None = None
    entities: list[str] = field(default_factory=list)  # compare: the entities, as the question names them
    sub_questions: list[str] = field(default_factory=list)  # compare: one per entity
    values: list[Read] = field(default_factory=list)  # compare: one single-hop read per entity
    planned: bool = False  # compare: the planner named the entities (else the question's own options)
    query: str | None = None  # retrieve, focus: the search the round made
    plan: dict | None = None  # chain: the checked plan (program.sharp.plans.Plan.to_record)
    hops: list[Read] = field(default_factory=list)  # chain: one single-hop read a hop, in order
    hop_answers: list[str] = field(default_factory=list)  # chain: each hop's answer as its passage writes it
    fallback: str | None = None  # why the round has no reads to answer from
    steps: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    # compare: the composer's call, apart (a policy that decides in code does not make it)
    compose_steps: list[dict] = field(default_factory=list)
    compose_calls: list[dict] = field(default_factory=list)
    compose_seconds: float = 0.0
    # chain: its second branch (a beam of 2, ``chain_beam``): hop 1's next answer carried through the later hops,
    # read on demand as the union read is; ``branch_tried``: the beam was read (None then: hop 1 had no other answer)
    branch: Round | None = None
    branch_tried: bool = False
    critique: dict | None = None  # the critic LM's reading of the round, where it was asked
    critic_steps: list[dict] = field(default_factory=list)
    critic_calls: list[dict] = field(default_factory=list)
    # ---- decided (recomputed live and in replay) ----
    round: int = 0
    answer: str | None = None
    how: str = ""  # how the answer was settled: read, p_yes, code, composed, option, name, span
    why: str = ""  # the code's reason (a comparison's winner, a yes/no threshold)
    features: dict[str, float] | None = None
    p_gate: float | None = None
    p_right: float | None = None
    source: str | None = None  # where P(right) came from: gate, judge, critic
    critic_used: bool = False
    flagged: bool = False  # the type check or the intermediate-entity sign flags what the reader wrote
    swapped: bool = False  # chain: the beam chose the branch, now in hops / hop_answers (the first in ``branch``)

    @property
    def parts(self) -> list[Read]:
        """The single-hop reads a round is made of: a comparison's values, a chain's hops (else none)."""
        return self.values if self.action == "compare" else self.hops if self.action == "chain" else []

    @property
    def evidence(self) -> list[Passage]:
        """The passages the round's answer rests on: its read's, or every value's or hop's read's (compare,
        chain: the union of the passages its reads saw)."""
        if self.action not in ("compare", "chain"):
            return list(self.read.evidence) if self.read else []
        seen: dict[str, Passage] = {}
        for v in self.parts:
            seen.update((p.id, p) for p in v.evidence if p.id not in seen)
        return list(seen.values())

    @property
    def cited_ids(self) -> list[str]:
        if self.action not in ("compare", "chain"):
            return list(self.read.cited_ids) if self.read else []
        return list(dict.fromkeys(i for v in self.parts for i in v.cited_ids))

    def take_branch(self) -> None:
        """Answer from the branch (the beam chose it): its hops, answers and stop trade places with the first
        chain's, which stays recorded as read (:meth:`to_record` writes the rounds as they were read)."""
        if self.branch is None:
            raise ValueError("a chain round without a branch cannot take it")
        b = self.branch
        self.hops, b.hops = b.hops, self.hops
        self.hop_answers, b.hop_answers = b.hop_answers, self.hop_answers
        self.fallback, b.fallback = b.fallback, self.fallback
        self.swapped = not self.swapped

    def to_record(self) -> dict:
        """What was read, as JSON (passages as id, title and score): a recording's round."""
        if self.swapped:  # as read: the first chain in hops, the branch in branch
            self.take_branch()
            try:
                return self.to_record()
            finally:
                self.take_branch()
        return {
            "action": self.action,
            "read": self.read.to_record() if self.read else None,
            "entities": list(self.entities),
            "sub_questions": list(self.sub_questions),
            "values": [v.to_record() for v in self.values],
            "planned": self.planned,
            "query": self.query,
            **(
                {"plan": self.plan, "hops": [h.to_record() for h in self.hops], "hop_answers": list(self.hop_answers)}
                if self.action == "chain"
                else {}
            ),
            **({"branch": self.branch.to_record() if self.branch else None} if self.branch_tried else {}),
            "fallback": self.fallback,
            "steps": self.steps,
            "calls": self.calls,
            "seconds": self.seconds,
            "compose_steps": self.compose_steps,
            "compose_calls": self.compose_calls,
            "compose_seconds": self.compose_seconds,
            "critique": self.critique,
            "critic_steps": self.critic_steps,
            "critic_calls": self.critic_calls,
        }

    @classmethod
    def from_record(cls, d: dict, passages: PassageLookup) -> Round:
        return cls(
            action=d["action"],
            read=Read.from_record(d["read"], passages) if d.get("read") else None,
            entities=list(d.get("entities") or []),
            sub_questions=list(d.get("sub_questions") or []),
            values=[Read.from_record(v, passages) for v in d.get("values") or []],
            planned=bool(d.get("planned")),
            query=d.get("query"),
            plan=d.get("plan"),
            hops=[Read.from_record(h, passages) for h in d.get("hops") or []],
            hop_answers=list(d.get("hop_answers") or []),
            fallback=d.get("fallback"),
            steps=[dict(s) for s in d.get("steps") or []],
            calls=[dict(c) for c in d.get("calls") or []],
            seconds=float(d.get("seconds") or 0.0),
            compose_steps=[dict(s) for s in d.get("compose_steps") or []],
            compose_calls=[dict(c) for c in d.get("compose_calls") or []],
            compose_seconds=float(d.get("compose_seconds") or 0.0),
            critique=d.get("critique"),
            critic_steps=[dict(s) for s in d.get("critic_steps") or []],
            critic_calls=[dict(c) for c in d.get("critic_calls") or []],
            branch=cls.from_record(d["branch"], passages) if d.get("branch") else None,
            branch_tried="branch" in d,
        )


def _plain(p: Passage) -> dict:
    return {"id": p.id, "title": p.title, "score": round(float(p.score), 6)}


# id, title and score of recorded passages -> the passages (their text looked up in the index)
PassageLookup = Callable[[Sequence[dict]], list[Passage]]


def titles_only(recorded: Sequence[dict]) -> list[Passage]:
    """Recorded passages without their text (what a replay has when it has no index at hand)."""
    return [Passage(str(p["id"]), str(p["title"]), "", float(p.get("score", 0.0))) for p in recorded]


def lookup_in(texts: dict[str, Passage]) -> PassageLookup:
    """Recorded passages with their text from ``texts`` (id -> Passage: an index's passages)."""

    def find(recorded: Sequence[dict]) -> list[Passage]:
        out = []
        for p in recorded:
            known = texts.get(str(p["id"]))
            text = known.text if known is not None else ""
            out.append(Passage(str(p["id"]), str(p["title"]), text, float(p.get("score", 0.0))))
        return out

    return find


@dataclass
class Run:
    """One question's loop: its form, the judged rounds, the searches made and how it ended."""

    question: str
    form: Form
    rounds: list[Round] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    stop: str | None = None

    def first(self) -> Round | None:
        return self.rounds[0] if self.rounds else None


class RoundSource(Protocol):
    """Where the loop's rounds come from: answered live, or looked up in a recording."""

    def read(self, run: Run, action: Action, policy: Any, tr: Tracer) -> Round:
        """The reads of ``action`` for ``run``'s question, their steps already in ``tr`` (a comparison's
        without the composer's: the loop asks :meth:`compose` where its policy needs it)."""
        ...

    def compose(self, run: Run, rnd: Round, tr: Tracer) -> Read:
        """The composer's answer to a comparison round from its values, or a chain's read of the question
        over its hops' passages (its steps in ``tr``)."""
        ...

    def branch(self, run: Run, rnd: Round, tr: Tracer) -> Round | None:
        """A chain round's second branch (hop 1's next answer carried through the later hops: the beam), its
        steps in ``tr``; None where hop 1 had no other answer. Kept on ``rnd`` (``branch``, ``branch_tried``)."""
        ...

    def critique(self, run: Run, rnd: Round, tr: Tracer) -> dict | None:
        """The critic LM's reading of ``rnd`` (its steps in ``tr``), or None when its reply was discarded."""
        ...

    def spent(self, policy: Any, tr: Tracer) -> str | None:
        """The name of the budget the question has used up, or None."""
        ...


class RecordedRounds:
    """A recording's rounds, looked up by action: a replay's source. Each round's recorded steps and LM
    calls enter the tracer as the loop reaches it (renumbered to the round the replay reaches it in), and its
    recorded seconds count against a time budget."""

    def __init__(self, record: dict, passages: PassageLookup = titles_only):
        if record.get("error"):
            raise ReplayError(record["error"])
        if record.get("format") != FORMAT:
            raise ReplayError(
                f"the record is format {record.get('format')}, this code replays format {FORMAT}; record again"
            )
        self.record = record
        self.by_action = {r["action"]: r for r in record["rounds"]}
        self.passages = passages
        self.seconds = 0.0

    def read(self, run: Run, action: Action, policy: Any, tr: Tracer) -> Round:
        found = self.by_action.get(action)
        if found is None:
            raise ReplayError(f"the policy runs the {action!r} repair, which the recording did not record")
        rnd = Round.from_record(found, self.passages)
        rnd.round = len(run.rounds)
        if rnd.action in ("compare", "chain"):
            rnd.read = None  # the composed answer (a chain's union read): the loop asks compose() where needed
        self._enter(rnd.steps, rnd.calls, rnd.seconds, rnd.round, tr)
        run.queries.extend(q for q in self._queries(rnd.steps) if q not in run.queries)
        return rnd

    def compose(self, run: Run, rnd: Round, tr: Tracer) -> Read:
        recorded = self.by_action[rnd.action].get("read")
        if recorded is None:
            raise ReplayError(f"the policy composes a {rnd.action} round the recording did not compose")
        self._enter(rnd.compose_steps, rnd.compose_calls, rnd.compose_seconds, rnd.round, tr)
        return Read.from_record(recorded, self.passages)

    def branch(self, run: Run, rnd: Round, tr: Tracer) -> Round | None:
        if not rnd.branch_tried:
            raise ReplayError(
                "the policy carries hop 1's second answer (chain_beam), which the recording did not read; record "
                "again with chain_beam set"
            )
        if rnd.branch is not None:
            self._enter(rnd.branch.steps, rnd.branch.calls, rnd.branch.seconds, rnd.round, tr)
            run.queries.extend(q for q in self._queries(rnd.branch.steps) if q not in run.queries)
        return rnd.branch

    def critique(self, run: Run, rnd: Round, tr: Tracer) -> dict | None:
        if not self.record.get("critiqued", False):
            raise ReplayError("the policy asks the critic about a round the recording did not critique")
        self._enter(rnd.critic_steps, rnd.critic_calls, _step_seconds(rnd.critic_steps), rnd.round, tr)
        return rnd.critique

    def spent(self, policy: Any, tr: Tracer) -> str | None:
        return policy.budget.spent(tr.ledger.summary(), self.seconds)

    def _enter(self, steps: list[dict], calls: list[dict], seconds: float, round_no: int, tr: Tracer) -> None:
        for s in steps:
            info = {k: v for k, v in s.items() if k not in ("step", "role")}
            if "round" in info:  # the round the replay reaches it in (explore mode's order may differ)
                info["round"] = round_no
            tr.add(s["role"], **info)
        for c in calls:
            tr.ledger.add(CallRecord(**c))
        self.seconds += seconds

    @staticmethod
    def _queries(steps: list[dict]) -> list[str]:
        return [q for s in steps if s.get("role") == "retriever" for q in s.get("queries") or []]


def _step_seconds(steps: list[dict]) -> float:
    return sum(float(s.get("seconds") or 0) for s in steps)
