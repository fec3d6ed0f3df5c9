"""SHARP's policy: every setting an optimizer may tune (:class:`SharpConfig`), and the policy a recording
explores with (:class:`Explore`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import Field, field_validator, model_validator

from program.config import StrictConfig
from program.sharp.critic import critic_lm_config
from program.sharp.forms import Form
from program.sharp.gate import AnswerCalibrator
from program.sharp.rounds import REPAIRS_FOR
from program.sharp.sentences import SentenceSelector
from program.tracing import Budget

__all__ = [
    "BRIDGE_ORDERS",
    "CHAIN_ORDERS",
    "LEVERS",
    "POLICY_FIELDS",
    "REPAIR_ORDERS",
    "TUNED_FIELDS",
    "UNCALIBRATED_P",
    "YES_GRID",
    "Explore",
    "Lever",
    "Policy",
    "Repair",
    "SharpConfig",
    "bare_off",
    "neutral_policy",
]


Repair = Literal["retrieve", "compare", "focus", "chain"]
# what a round's P(right) is without a fitted gate: the answer tokens' geometric-mean probability, or a coin
# flip when the LM returned no log-probabilities
UNCALIBRATED_P = 0.5
# a form's repairs as a search choice: the actions in order, comma-separated; "none" for no repair
BRIDGE_ORDERS = ("focus", "retrieve", "focus,retrieve", "retrieve,focus", "none")
# orders with the chain of single hops (program/sharp/chain.py): valid choices, searched where a space lists them
# (experiments/spaces/chain.yaml), since a recording must then hold every bridge's chain
CHAIN_ORDERS = ("chain", "chain,retrieve", "retrieve,chain", "focus,chain", "chain,focus", "focus,retrieve,chain")
REPAIR_ORDERS = ("compare", "retrieve", "compare,retrieve", "retrieve,compare", "none")
# a yes/no threshold's choices: off (the reader's text) or the P("yes") at which the answer is "yes"; the 1.5B
# reader's P("yes") sits near 1 on most questions, so the grid is finer there
YES_GRID = ("off", 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995)
_NOT_OFF = object()  # a lever that has no "off" choice
# a lever's neutral value where it does not matter without repairs: the neutral policy keeps the program's own
KEEP = object()


@dataclass(frozen=True)
class Lever:
    """A policy setting, declared once, on its :class:`SharpConfig` field (``Annotated[type, Lever(...)]``):
    what `sharp tune` searches by default (``search``: the choices, or the float range "threshold" / "floor"
    of the search space), the value a recording explores with (``explore``: every round reached, every read
    kept), its ``neutral`` value (the ranked read as the reader wrote it: no rule of code, no repair), the
    valid choices where they are more than the default search (``valid``), and the config value a search's
    "off" stands for (``off``). :data:`LEVERS` collects them; the tuned fields, the search space, the
    exploring and the neutral policies are derived from it."""

    search: tuple[Any, ...] | Literal["threshold", "floor"]
    explore: Any
    neutral: Any
    valid: tuple[Any, ...] | None = None
    off: Any = _NOT_OFF
    name: str = ""

    @property
    def has_off(self) -> bool:
        """Whether "off" is one of the lever's choices (a bare `off` in YAML, read as false, means it)."""
        return self.off is not _NOT_OFF

    @property
    def repairs(self) -> bool:
        return self.name.startswith("repair_")

    def setting(self, choice: Any) -> Any:
        """The config value a search choice stands for (a repair order's tuple, a threshold's "off" as None)."""
        if self.has_off and bare_off(choice) == "off":
            return self.off
        if self.repairs and isinstance(choice, str):
            return () if choice == "none" else tuple(choice.split(","))
        return choice

    def choice(self, setting: Any) -> Any:
        """The search choice that stands for a config value."""
        if self.repairs:
            return ",".join(setting) or "none"
        if self.off is not _NOT_OFF and setting == self.off:
            return "off"
        return setting


def bare_off(value: Any) -> Any:
    """YAML reads a bare `off` as false (`--set ask_critic=off`, `--fix yes_threshold=off`, a config file):
    the word the user wrote."""
    return "off" if value is False else value


class SharpConfig(StrictConfig):
    """Everything an optimizer may tune, validated."""

    SAVED_ONLY_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"hop_passage_chars", "chain_beam"})

    # the evidence ranker the searches go through (its probabilities are features of the answer critic): a
    # ranker's name, "dataset" for the dataset's own (experiments/rankers.py), or None for plain hybrid search
    ranker: str | None = "dataset"
    # k of the draft's search, then of the retrieval repair's ("QUESTION DRAFT"): three ranked passages read
    # best for the 1.5B reader; the repair widens to five (experiments/RESULTS.md, 'Reading')
    k_schedule: tuple[int, ...] = (3, 5)
    evidence_cap: int = Field(5, ge=1, le=40)  # a re-read (retrieve, focus) reads at most this many passages
    passage_chars: int = Field(600, ge=50, le=5000)
    # how much of each passage a chain hop's read shows (None: passage_chars): a hop reads one entity's passage,
    # whose asked fact often stands past the first 600 characters (the gold-hop-1 ceiling on 2Wiki train:
    # experiments/findings/chain.md)
    hop_passage_chars: int | None = Field(None, ge=50, le=5000)
    # stop when a round's P(right) reaches this; `sharp tune` searches it
    accept_threshold: Annotated[float, Lever("threshold", explore=2.0, neutral=1.0)] = Field(0.8, ge=0.0, le=1.0)
    # the same for comparisons and yes/no questions, where their drafts fail otherwise (None: accept_threshold)
    accept_comparison: Annotated[float | None, Lever("threshold", explore=2.0, neutral=1.0)] = Field(
        None, ge=0.0, le=1.0
    )
    accept_yesno: Annotated[float | None, Lever("threshold", explore=2.0, neutral=1.0)] = Field(None, ge=0.0, le=1.0)
    # when the critic LM reads a round: never, on every round, or in the band [critic_floor, accept) of the
    # gate's P (the gate alone accepts above it; below the floor the round is repaired unread). Off by
    # default: the 1.5B critic's verdict did not tell right drafts from wrong ones on held-out train drafts
    # (experiments/RESULTS.md, 'The answer critic'); `sharp tune` can turn it on where it pays
    ask_critic: Annotated[
        Literal["off", "band", "always"], Lever(("off", "band", "always"), explore="always", neutral="off")
    ] = "off"
    critic_floor: Annotated[float, Lever("floor", explore=0.0, neutral=KEEP)] = Field(0.0, ge=0.0, le=1.0)
    # (a recording runs every repair of the form, however many: the cap is a replay's choice; with two, a flagged
    # bridge's focused read and retrieval left its chain unrecorded)
    max_repairs: Annotated[int, Lever((0, 1, 2), explore=max(map(len, REPAIRS_FOR.values())), neutral=1)] = Field(
        2, ge=0, le=2
    )
    # the repairs a rejected round gets, in order, by the question's form (program/sharp/forms.py)
    repair_bridge: Annotated[
        tuple[Repair, ...],
        Lever(BRIDGE_ORDERS, explore=REPAIRS_FOR["bridge"], neutral=(), valid=BRIDGE_ORDERS + CHAIN_ORDERS),
    ] = ("retrieve",)
    repair_comparison: Annotated[
        tuple[Repair, ...], Lever(REPAIR_ORDERS, explore=REPAIRS_FOR["comparison"], neutral=())
    ] = ("compare", "retrieve")
    repair_yesno: Annotated[tuple[Repair, ...], Lever(REPAIR_ORDERS, explore=REPAIRS_FOR["yesno"], neutral=())] = (
        "compare",
        "retrieve",
    )
    # the focused read runs on a rejected bridge draft ("rejected"), or only on one the type check or the
    # intermediate-entity sign flags ("flagged")
    # (a search offers "flagged" alone by default: what a recording of focused reads holds; one with a focused
    # read after every bridge draft serves "rejected" too)
    focus_when: Annotated[
        Literal["rejected", "flagged"],
        Lever(("flagged",), explore="rejected", neutral=KEEP, valid=("rejected", "flagged")),
    ] = "flagged"
    # the answer: the round with the highest P(right) ("confidence"), or the last round's ("last")
    choose: Annotated[Literal["confidence", "last"], Lever(("confidence", "last"), explore="last", neutral="last")] = (
        "confidence"
    )
    # a yes/no question's answer from the reader's P("yes") against P("no"): "yes" at or above this (None: the
    # text the reader wrote); ``yes_threshold_sub`` the same for the per-entity checks of a comparison
    yes_threshold: Annotated[float | None, Lever(YES_GRID, explore=None, neutral=None, off=None)] = Field(
        None, ge=0.0, le=1.0
    )
    yes_threshold_sub: Annotated[float | None, Lever(YES_GRID, explore=None, neutral=None, off=None)] = Field(
        None, ge=0.0, le=1.0
    )
    # a comparison's answer: decided in code from the parsed values, the LM composing what does not parse
    # ("code"), or always composed by the LM from the values ("composer")
    compare_by: Annotated[
        Literal["code", "composer"], Lever(("code", "composer"), explore="composer", neutral=KEEP)
    ] = "code"
    # a chosen option written as the question names it, or as its passage's first sentence does
    option_form: Annotated[
        Literal["question", "passage"], Lever(("question", "passage"), explore="question", neutral="question")
    ] = "question"
    # a choice answered with none of its options becomes the option it shares most words with
    force_option: Annotated[bool, Lever((False, True), explore=False, neutral=False)] = False
    # an answer that names an evidence passage written as that passage names it ("name"), one that is not an
    # evidence span mapped to the closest span ("span"), both, or neither; any of them drops a title's
    # parenthesised qualifier ("USS Essex (CV-9)" -> "USS Essex")
    span_rule: Annotated[
        Literal["off", "name", "span", "both"],
        Lever(("off", "name", "span", "both"), explore="off", neutral="off", off="off"),
    ] = "off"
    # a place written "Boston, Massachusetts" answering a "where" question: as read ("off"), or its first part
    # ("first": "Boston"), as most of 2WikiMultihopQA's gold places are written
    place_rule: Annotated[Literal["off", "first"], Lever(("off", "first"), explore="off", neutral="off", off="off")] = (
        "off"
    )
    # a chain's answer (the ``chain`` repair of a bridge, program/sharp/chain.py): its last hop's ("hop"), or one
    # read of the whole question over the union of the hops' passages ("union", one more LM call)
    # (recorded with the union read, so a replay can answer either way; searched where a space lists "union")
    chain_answer: Annotated[
        Literal["hop", "union"], Lever(("hop",), explore="union", neutral=KEEP, valid=("hop", "union"))
    ] = "hop"
    # a beam of 2 for a chain: where hop 1's first answer token has at most this probability, hop 1 is read again
    # over its passages that do not hold that answer and the second answer is carried through the later hops; the
    # gate keeps the better branch (None: off). Replayed only over a recording made with it set (it reads the
    # branch of every chain, at any probability); a chain answered by its union read carries no beam
    chain_beam: Annotated[float | None, Lever(("off",), explore=None, neutral=None, off=None)] = Field(
        None, ge=0.0, le=1.0
    )
    # what the draft reads: the top k_schedule[0] passages whole, or the sentences the selector keeps of the top
    # sentence_passages passages (sentence_budget sentences in all: each passage's first, then the best scored)
    evidence: Literal["passages", "sentences"] = "passages"
    selector: SentenceSelector | None = None
    sentence_passages: int = Field(5, ge=1, le=20)
    sentence_budget: int = Field(10, ge=1, le=60)
    gate: AnswerCalibrator | None = None  # P(right) without the critic; fitted by `sharp compile --target critic`
    judge: AnswerCalibrator | None = None  # P(right) with the critic's verdict; fitted alike
    max_sub_questions: int = Field(3, ge=2, le=5)
    sub_k: int = Field(3, ge=1, le=10)  # passages a per-entity read, a chain hop (or the focused search) reads
    structured_adapter: Literal["chat", "json"] = "json"
    generator_adapter: Literal["chat", "json"] = "json"
    planner_max_tokens: int = Field(160, ge=16, le=4096)
    critic_max_tokens: int = Field(160, ge=16, le=4096)
    compose_max_tokens: int = Field(64, ge=8, le=1024)
    max_question_chars: int = Field(2000, ge=50)
    budget: Budget = Budget(max_lm_calls=8)

    @field_validator("yes_threshold", "yes_threshold_sub", mode="before")
    @classmethod
    def _threshold_not_bool(cls, v: Any) -> Any:
        # a bool would pass as 0.0 or 1.0 ("off" read as false would answer "yes" to every yes/no question)
        if isinstance(v, bool):
            raise ValueError(f"a probability in [0, 1] or null (off), not {v!r}")
        return v

    @field_validator("ask_critic", "span_rule", mode="before")
    @classmethod
    def _bare_off(cls, v: Any) -> Any:
        return bare_off(v)

    @field_validator("k_schedule")
    @classmethod
    def _schedule(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or len(v) > 2 or any(k < 1 for k in v) or list(v) != sorted(v):
            raise ValueError(
                f"k_schedule is the draft's k and the retrieval repair's (one or two k >= 1, non-decreasing), "
                f"got {list(v)}"
            )
        return tuple(v)

    @field_validator("repair_bridge", "repair_comparison", "repair_yesno")
    @classmethod
    def _repairs(cls, v: tuple[str, ...], info: Any) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"a repair is listed twice: {list(v)}")
        form = info.field_name.removeprefix("repair_")
        bad = [a for a in v if a not in REPAIRS_FOR[form]]
        if bad:
            raise ValueError(f"{bad} cannot repair a {form} question; choose from {list(REPAIRS_FOR[form])}")
        return tuple(v)

    @model_validator(mode="after")
    def _consistent(self) -> SharpConfig:
        if self.evidence == "sentences" and self.selector is None:
            raise ValueError("evidence: reading sentences needs a fitted sentence selector (selector)")
        if self.judge is not None and not self.judge.needs_critic:
            raise ValueError("judge: a judge calibrator reads the critic's verdict; this one does not (use gate)")
        if self.gate is not None and self.gate.needs_critic:
            raise ValueError("gate: the gate calibrator must not read the critic's verdict (use judge)")
        if self.chain_beam is not None and self.chain_answer == "union":
            raise ValueError(
                "chain_beam: a chain answered by its union read (chain_answer: union) reads the first chain's "
                "passages; the beam needs chain_answer: hop"
            )
        return self

    def accept_for(self, form: Form) -> float:
        """The P(right) at which a round of a question of ``form`` is accepted."""
        own = {"comparison": self.accept_comparison, "yesno": self.accept_yesno}.get(form)
        return self.accept_threshold if own is None else own

    def repairs_for(self, form: Form) -> tuple[Repair, ...]:
        return {"bridge": self.repair_bridge, "comparison": self.repair_comparison, "yesno": self.repair_yesno}[form]

    def reachable_repairs(self) -> tuple[Repair, ...]:
        """The repairs this policy can run on some question (none when it never repairs), sorted."""
        if self.max_repairs == 0:
            return ()
        return tuple(sorted({*self.repair_bridge, *self.repair_comparison, *self.repair_yesno}))

    def critic_lm_config(self) -> dict:
        return critic_lm_config(self.critic_max_tokens)


def _levers() -> dict[str, Lever]:
    found = {}
    for name, info in SharpConfig.model_fields.items():
        for meta in info.metadata:
            if isinstance(meta, Lever):
                found[name] = replace(meta, name=name, valid=meta.valid or (meta.search if meta.search not in (
                    "threshold", "floor") else None))  # fmt: skip
    return found


# every policy lever, in declaration order
LEVERS: dict[str, Lever] = _levers()
# the settings that decide which rounds a run reaches and what it answers from their reads, never what a round
# reads: replay varies them over one recording (optimize/replay.py), `sharp tune` searches them
TUNED_FIELDS: tuple[str, ...] = tuple(LEVERS)
POLICY_FIELDS = (*TUNED_FIELDS, "gate", "judge", "budget")


def neutral_policy() -> dict[str, Any]:
    """Every lever at its neutral value: the ranked read as the reader wrote it, no rule of code over its
    answer, no repair (a lever study's baseline; ``config.replace(**neutral_policy())``); the levers that do
    not matter without a repair keep the program's own value."""
    return {name: lever.neutral for name, lever in LEVERS.items() if lever.neutral is not KEEP}


class Policy(Protocol):
    """What the loop asks of a policy (program/sharp/loop.py): a :class:`SharpConfig`, :class:`Explore` (a
    recording's), or a replay's wrapper around one (optimize/replay.py). Its lever values are read as
    attributes (:data:`LEVERS`)."""

    gate: AnswerCalibrator | None
    judge: AnswerCalibrator | None
    budget: Budget

    def accept_for(self, form: Form) -> float: ...

    def repairs_for(self, form: Form) -> tuple[str, ...]: ...

    def __getattr__(self, name: str) -> Any: ...


class Explore:
    """The policy of a recording: every lever at its exploring value (:data:`LEVERS`): every repair a question
    of its form can get (or those in ``actions``), in order, none accepted early; every comparison composed by
    the LM too and every chain read whole too (so a replay can take either path); each round critiqued, or
    none (``critique=False``: such a record replays only policies that never ask the critic); with ``beam`` (the
    recorded program sets ``chain_beam``), every chain's second branch read too, whatever hop 1's probability."""

    gate = judge = None
    budget = Budget(max_lm_calls=None)

    def __init__(
        self,
        critique: bool = True,
        actions: Sequence[str] | None = None,
        focus_when: str = "rejected",
        beam: bool = False,
    ):
        for name, lever in LEVERS.items():
            setattr(self, name, lever.explore)
        self.chain_beam = 1.0 if beam else None  # beam: every chain's second branch read (any threshold replays)
        self.ask_critic = "always" if critique else "off"
        self.actions = None if actions is None else tuple(actions)
        self.focus_when = focus_when  # "flagged": focused reads of flagged drafts alone (what flagged policies run)

    def accept_for(self, form: Form) -> float:
        return 2.0  # above every probability: no round is accepted, every repair runs

    def repairs_for(self, form: Form) -> tuple[str, ...]:
        """Every repair of the form (or those of them in ``actions``: a narrower recording, grown later)."""
        return tuple(a for a in REPAIRS_FOR[form] if self.actions is None or a in self.actions)
