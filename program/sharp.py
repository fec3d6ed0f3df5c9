"""SHARP: draft -> judge -> (repair -> judge)* -> the most confident round's answer.

1. **Draft.** The question is searched once (the evidence ranker orders the pool) and the generator reads the
   top ``k_schedule[0]`` passages: the call one ranked pass makes anyway, here with its answer tokens'
   log-probabilities (and, at the first token, the alternatives it weighed: P("yes") against P("no")).
2. **Settle.** Code settles what the reads say (:func:`settle`, no LM call): a yes/no question from the
   reader's own P("yes") against a threshold fitted on train; a comparison from values parsed and compared in
   Python (program/values.py); a chosen option written as the question or its passage writes it; a span as
   the passage writes it (program/spans.py).
3. **Judge.** The answer critic gives P(the answer is right): the *gate*, a calibrated logistic regression
   over what the round knows without another LM call (program/calibration.py: the reader's confidence, the
   answer's type against what the question asks, whether it names the intermediate entity, the yes/no
   margin, agreement with the draft); where the policy asks for it, the critic LM (CritiqueAnswer) reads
   question, evidence and answer and its P(supported) joins (the *judge*). A confident round ends the loop.
4. **Repair.** A rejected round gets the repair its form calls for (:func:`next_step`): ``compare``
   (comparisons, yes/no questions about several entities) has the planner name the entities and write one
   sub-question each, reads each value single-hop and decides in code (the LM composes only what does not
   parse); ``focus`` (bridges) re-reads the draft's entity's own passage with the question restated for the
   second hop; ``retrieve`` searches "QUESTION DRAFT" at the wider k and re-reads the ranked pool.
5. **Select.** The answer is the round with the highest calibrated P(right), not always the last.

The loop is written once, :func:`play`, over a :class:`~program.rounds.RoundSource`: this program answering
live, or a recording (program/rounds.py: :class:`~program.rounds.RecordedRounds`) in replay, so the policy
`sharp tune` scores by replay is the policy that runs. Every exit returns an answer and a trace.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

import dspy
from pydantic import Field, field_validator, model_validator

from program.answer_types import mismatch
from program.answers import clean_answer, is_yes_no_question
from program.calibration import AnswerCalibrator, critic_features, round_features
from program.confidence import TOP_LOGPROBS
from program.config import StrictConfig
from program.critique import critic_lm_config, output_fields, read_critique
from program.evidence import EvidencePool, format_evidence
from program.forms import Form, matches_option, options, question_form, rule_checks, rule_sub_questions
from program.generation import answer_from_evidence, record_confidence
from program.parsing import items
from program.retrieval.base import Retriever
from program.rounds import REPAIRS_FOR, Action, Read, Round, RoundSource, Run
from program.sentences import SentenceSelector, select_sentences, split_sentences
from program.signatures import ComposeAnswer, CritiqueAnswer, DecomposeQuestion, GenerateAnswer, ReadSecondHop
from program.spans import closest_span, names_title, passage_name, words
from program.steps import Budget, Tracer, finish, traced
from program.types import Passage
from program.values import decide

__all__ = [
    "POLICY_FIELDS",
    "needs_composer",
    "TUNED_FIELDS",
    "Explore",
    "SharpConfig",
    "SharpRAG",
    "conclude",
    "flagged",
    "gate_probability",
    "next_step",
    "p_right",
    "play",
    "select",
    "settle",
    "wants_critic",
]

Repair = Literal["retrieve", "compare", "focus"]
# the settings that decide which rounds a run reaches and what it answers from their reads, never what a round
# reads: replay varies them over one recording (optimize/replay.py), `sharp tune` searches TUNED_FIELDS
TUNED_FIELDS = (
    "accept_threshold",
    "accept_comparison",
    "accept_yesno",
    "ask_critic",
    "critic_floor",
    "max_repairs",
    "repair_bridge",
    "repair_comparison",
    "repair_yesno",
    "focus_when",
    "choose",
    "yes_threshold",
    "yes_threshold_sub",
    "compare_by",
    "option_form",
    "force_option",
    "span_rule",
)
POLICY_FIELDS = (*TUNED_FIELDS, "gate", "judge", "budget")
# what a round's P(right) is without a fitted gate: the answer tokens' geometric-mean probability, or a coin
# flip when the LM returned no log-probabilities
UNCALIBRATED_P = 0.5


class SharpConfig(StrictConfig):
    """Everything an optimizer may tune, validated."""

    # the evidence ranker the searches go through (its probabilities are features of the answer critic): a
    # ranker's name, "dataset" for the dataset's own (experiments/rankers.py), or None for plain hybrid search
    ranker: str | None = "dataset"
    # k of the draft's search, then of the retrieval repair's ("QUESTION DRAFT"): three ranked passages read
    # best for the 1.5B reader; the repair widens to five (experiments/RESULTS.md, 'Reading')
    k_schedule: tuple[int, ...] = (3, 5)
    evidence_cap: int = Field(5, ge=1, le=40)  # a re-read (retrieve, focus) reads at most this many passages
    passage_chars: int = Field(600, ge=50, le=5000)
    # stop when a round's P(right) reaches this; `sharp tune` searches it
    accept_threshold: float = Field(0.8, ge=0.0, le=1.0)
    # the same for comparisons and yes/no questions, where their drafts fail otherwise (None: accept_threshold)
    accept_comparison: float | None = Field(None, ge=0.0, le=1.0)
    accept_yesno: float | None = Field(None, ge=0.0, le=1.0)
    # when the critic LM reads a round: never, on every round, or in the band [critic_floor, accept) of the
    # gate's P (the gate alone accepts above it; below the floor the round is repaired unread). Off by
    # default: the 1.5B critic's verdict did not tell right drafts from wrong ones on held-out train drafts
    # (experiments/RESULTS.md, 'The answer critic'); `sharp tune` can turn it on where it pays
    ask_critic: Literal["off", "band", "always"] = "off"
    critic_floor: float = Field(0.0, ge=0.0, le=1.0)
    max_repairs: int = Field(2, ge=0, le=2)
    # the repairs a rejected round gets, in order, by the question's form (program/forms.py)
    repair_bridge: tuple[Repair, ...] = ("retrieve",)
    repair_comparison: tuple[Repair, ...] = ("compare", "retrieve")
    repair_yesno: tuple[Repair, ...] = ("compare", "retrieve")
    # the focused read runs on a rejected bridge draft ("rejected"), or only on one the type check or the
    # intermediate-entity sign flags ("flagged")
    focus_when: Literal["rejected", "flagged"] = "flagged"
    # the answer: the round with the highest P(right) ("confidence"), or the last round's ("last")
    choose: Literal["confidence", "last"] = "confidence"
    # a yes/no question's answer from the reader's P("yes") against P("no"): "yes" at or above this (None: the
    # text the reader wrote); ``yes_threshold_sub`` the same for the per-entity checks of a comparison
    yes_threshold: float | None = Field(None, ge=0.0, le=1.0)
    yes_threshold_sub: float | None = Field(None, ge=0.0, le=1.0)
    # a comparison's answer: decided in code from the parsed values, the LM composing what does not parse
    # ("code"), or always composed by the LM from the values ("composer")
    compare_by: Literal["code", "composer"] = "code"
    # a chosen option written as the question names it, or as its passage's first sentence does
    option_form: Literal["question", "passage"] = "question"
    # a choice answered with none of its options becomes the option it shares most words with
    force_option: bool = False
    # an answer that names an evidence passage written as that passage names it ("name"), one that is not an
    # evidence span mapped to the closest span ("span"), both, or neither; any of them drops a title's
    # parenthesised qualifier ("USS Essex (CV-9)" -> "USS Essex")
    span_rule: Literal["off", "name", "span", "both"] = "off"
    # what the draft reads: the top k_schedule[0] passages whole, or the sentences the selector keeps of the top
    # sentence_passages passages (sentence_budget sentences in all: each passage's first, then the best scored)
    evidence: Literal["passages", "sentences"] = "passages"
    selector: SentenceSelector | None = None
    sentence_passages: int = Field(5, ge=1, le=20)
    sentence_budget: int = Field(10, ge=1, le=60)
    gate: AnswerCalibrator | None = None  # P(right) without the critic; fitted by `sharp compile --target critic`
    judge: AnswerCalibrator | None = None  # P(right) with the critic's verdict; fitted alike
    max_sub_questions: int = Field(3, ge=2, le=5)
    sub_k: int = Field(3, ge=1, le=10)  # passages a per-entity read (or the focused search) answers from
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
        # YAML reads a bare `off` as false (`--set ask_critic=off`, a config file): the word the user wrote
        return "off" if v is False else v

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


class Explore:
    """The policy of a recording: every repair a question of its form can get (or those in ``actions``), in
    order, none accepted early; every comparison composed by the LM too (so a replay can take either path);
    each round critiqued, or none (``critique=False``: such a record replays only policies that never ask the
    critic)."""

    critic_floor = 0.0
    gate = judge = None
    max_repairs = 2
    yes_threshold = yes_threshold_sub = None
    compare_by = "composer"
    option_form = "question"
    force_option = False
    span_rule = "off"
    choose = "last"
    budget = Budget(max_lm_calls=None)

    def __init__(self, critique: bool = True, actions: Sequence[str] | None = None, focus_when: str = "rejected"):
        self.ask_critic = "always" if critique else "off"
        self.actions = None if actions is None else tuple(actions)
        self.focus_when = focus_when  # "flagged": focused reads of flagged drafts alone (what flagged policies run)

    def accept_for(self, form: Form) -> float:
        return 2.0  # above every probability: no round is accepted, every repair runs

    def repairs_for(self, form: Form) -> tuple[str, ...]:
        """Every repair of the form (or those of them in ``actions``: a narrower recording, grown later)."""
        return tuple(a for a in REPAIRS_FOR[form] if self.actions is None or a in self.actions)


Policy = SharpConfig | Explore


# ---- the loop's decisions: pure, the same live and in replay ----------------------------------------------
def gate_probability(features: dict[str, float], policy: Policy) -> float:
    """P(right) of a round without the critic: the fitted gate, else the answer tokens' geometric mean."""
    if policy.gate is not None:
        return policy.gate.probability(features)
    if features.get("lp_missing"):
        return UNCALIBRATED_P
    return math.exp(features["lp_mean"])


def wants_critic(p_gate: float, policy: Policy, form: Form) -> bool:
    """Whether the critic LM reads a round of a ``form`` question whose gate probability is ``p_gate``."""
    if policy.ask_critic == "always":
        return True
    return policy.ask_critic == "band" and policy.critic_floor <= p_gate < policy.accept_for(form)


def p_right(features: dict[str, float], p_gate: float, critique: dict | None, policy: Policy) -> tuple[float, str]:
    """A round's P(right) and where it came from: the judge (gate features and the critic's verdict), the
    critic's own P(supported) when no judge is fitted, else the gate (also when the critique was discarded)."""
    extra = critic_features(critique)
    if extra is None:
        return p_gate, "gate"
    if policy.judge is not None:
        return policy.judge.probability({**features, **extra}), "judge"
    return extra["p_supported"], "critic"


def flagged(run: Run, rnd: Round) -> bool:
    """Whether the type check or the intermediate-entity sign flags what the reader wrote (its own words,
    before any rule of code: a recording's focused reads then serve every policy): a kind of thing the
    question does not ask for, or the title of an evidence passage the question does not name."""
    if rnd.read is None or rnd.action == "compare":
        return False
    answer, asked = rnd.read.answer, set(words(run.question))
    return mismatch(run.question, answer) or any(
        names_title(answer, p) and not set(words(p.title)) <= asked for p in rnd.read.evidence
    )


def next_step(rounds: Sequence[Round], form: Form, policy: Policy, spent: str | None = None) -> tuple[str | None, str]:
    """After a judged round: (the repair to run next, "") or (None, why the loop stops): "confident" when
    a round reached the threshold, "budget_*" when a budget is spent, "max_repairs", or "no_repair_left"
    (every repair for the question's form was tried, or none fits). A critique that calls the evidence
    incomplete moves the retrieval repair first; a focused read needs a flagged draft under
    ``focus_when="flagged"``."""
    judged = [r.p_right for r in rounds if r.p_right is not None]
    if judged and max(judged) >= policy.accept_for(form):
        return None, "confident"
    if spent is not None:
        return None, f"budget_{spent}"
    if len(rounds) - 1 >= policy.max_repairs:
        return None, "max_repairs"
    done = {r.action for r in rounds}
    plan = [a for a in policy.repairs_for(form) if a not in done]
    if policy.focus_when == "flagged" and not rounds[0].flagged:
        plan = [a for a in plan if a != "focus"]
    last = (rounds[-1].critique or {}).get("verdict") if rounds[-1].critic_used else None
    if last == "incomplete" and "retrieve" in plan:
        plan = ["retrieve", *(a for a in plan if a != "retrieve")]
    return (plan[0], "") if plan else (None, "no_repair_left")


def select(rounds: Sequence[Round], policy: Policy) -> Round:
    """The round whose answer is returned: the most confident (the earliest on a tie), or the last; rounds
    without an answer (a comparison whose values decided nothing and were not composed) are never chosen,
    unless none has one (then the draft, whose answer is None)."""
    answered = [r for r in rounds if r.answer is not None] or list(rounds[:1])
    if policy.choose == "last":
        return answered[-1]
    return max(answered, key=lambda r: (r.p_right if r.p_right is not None else -1.0, -r.round))


def _yes_no(read: Read, threshold: float | None) -> tuple[str, str, str]:
    """A yes/no read's answer: from P("yes") against ``threshold`` where both are known, else its text."""
    p = read.p_yes
    if threshold is None:
        return read.answer, "read", ""
    if p is None:  # the LM gave no log-probabilities for the first answer token
        return read.answer, "read", "no P(yes) from the LM: its text answer"
    return ("yes" if p >= threshold else "no"), "p_yes", f"P(yes) {p:.2f} against {threshold:.2f}"


def _compared(run: Run, rnd: Round, policy: Policy) -> tuple[str | None, str, str]:
    """A comparison round's answer: code's decision from the values read, else the composer's."""
    if rnd.fallback or not rnd.values:
        return None, "", rnd.fallback or "no value read"
    composed = rnd.read.answer if rnd.read and rnd.read.answer.lower() not in ("", "unknown") else None
    if policy.compare_by == "composer":
        return composed, "composed", ""
    values = [
        _yes_no(v, policy.yes_threshold_sub)[0] if is_yes_no_question(sub) else v.answer
        for sub, v in zip(rnd.sub_questions, rnd.values)
    ]
    decision = decide(run.question, rnd.entities, values, choice=run.form == "comparison")
    if decision.answer is not None:
        return decision.answer, "code", decision.why
    surer = _surer_yes(run, rnd)
    if surer is not None:
        return surer
    return composed, ("composed" if composed else ""), decision.why


def _surer_yes(run: Run, rnd: Round) -> tuple[str, str, str] | None:
    """A choice between options checked yes/no one each, where both or neither read "yes": the option whose
    check reads "yes" more surely (P("yes") against P("no")); the small reader's lean to "yes" is the same
    for both checks, so the difference is what it read. None where a check is not a yes/no question, has no
    P("yes"), or the two tie."""
    if run.form != "comparison" or len(rnd.values) != 2 or len(rnd.entities) != 2:
        return None
    if not all(is_yes_no_question(sub) for sub in rnd.sub_questions):
        return None
    p = [v.p_yes for v in rnd.values]
    if None in p or p[0] == p[1]:
        return None
    win = 0 if p[0] > p[1] else 1  # type: ignore[operator]
    return rnd.entities[win], "code", f"P(yes) {p[win]:.2f} against {p[1 - win]:.2f}: the surer yes"


def _evidence_of(run: Run, rnd: Round) -> list[Passage]:
    """The passages a round's answer may be written from: its own, then the draft's."""
    seen: dict[str, Passage] = {p.id: p for p in rnd.evidence}
    for r in run.rounds[:1]:
        seen.update((p.id, p) for p in r.evidence if p.id not in seen)
    return list(seen.values())


def _as_option(answer: str, opts: list[str], run: Run, rnd: Round, policy: Policy) -> tuple[str, str] | None:
    """A choice's answer as one of its options (None: it names none and ``force_option`` is off)."""
    named = [o for o in opts if matches_option(answer, [o])]
    how = "option"
    if not named and policy.force_option:
        overlap = [(len(set(words(answer)) & set(words(o))), o) for o in opts]
        best = max(overlap)[0]
        named = [o for n, o in overlap if n == best and n > 0]
        how = "forced"
    if len(named) != 1:
        return None
    option = named[0]
    if policy.option_form == "passage":
        option = passage_name(option, _evidence_of(run, rnd)) or option
    return option, how


# a title's parenthesised qualifier ("USS Essex (CV-9)", "Catwoman (video game)"): gold spans leave it out
_QUALIFIER = re.compile(r"\s*\([^()]*\)")


def settle(run: Run, rnd: Round, policy: Policy) -> None:
    """The round's answer as code settles it from its reads (``answer``, ``how``, ``why``), in place: a yes/no
    question decided from P("yes"), a comparison from its values, an option or a span written as the question
    or the passage writes it. Pure: the same live and in replay."""
    if rnd.action == "compare":
        answer, how, why = _compared(run, rnd, policy)
    elif rnd.read is None:
        answer, how, why = None, "", rnd.fallback or "nothing read"
    elif run.form == "yesno":
        answer, how, why = _yes_no(rnd.read, policy.yes_threshold)
    else:
        answer, how, why = rnd.read.answer, "read", ""
    opts = options(run.question)
    if answer is not None and opts and answer.lower() not in ("yes", "no"):
        written = _as_option(answer, opts, run, rnd, policy)
        if written is not None and written[0] != answer:  # the trace says code wrote it so
            answer, how = written[0], how if how in ("code", "p_yes") else written[1]
    elif answer is not None and answer.lower() not in ("yes", "no", "unknown") and policy.span_rule != "off":
        evidence = _evidence_of(run, rnd)
        bare = _QUALIFIER.sub("", answer).strip() or answer
        rewritten = None
        if policy.span_rule in ("name", "both"):
            rewritten = passage_name(bare, evidence)
        if rewritten is None and policy.span_rule in ("span", "both"):
            rewritten = closest_span(bare, evidence)
        rewritten = rewritten or (bare if bare != answer else None)
        if rewritten is not None:
            answer, how, why = rewritten, "span", f"{answer!r} written as the passage writes it"
    rnd.answer, rnd.how, rnd.why = answer, how, why


def needs_composer(run: Run, rnd: Round, policy: Policy) -> bool:
    """Whether a comparison round's answer needs the composer: its values read, and code cannot decide from
    them (or the policy always composes)."""
    if rnd.action != "compare" or rnd.fallback or not rnd.values or rnd.read is not None:
        return False
    settle(run, rnd, policy)
    return policy.compare_by == "composer" or rnd.how != "code"


def judge(run: Run, rnd: Round, source: RoundSource, policy: Policy, tr: Tracer) -> None:
    """Settle a read round, then its features, gate, critic (where the policy wants it) and P(right), in
    place; a judgement step records the outcome."""
    settle(run, rnd, policy)
    rnd.flagged = flagged(run, rnd)
    if rnd.answer is None:
        rnd.features, rnd.p_gate, rnd.p_right, rnd.source, rnd.critic_used = None, None, None, None, False
    else:
        rnd.features = {k: round(v, 4) for k, v in round_features(run, rnd).items()}
        rnd.p_gate = round(gate_probability(rnd.features, policy), 4)
        rnd.critic_used = wants_critic(rnd.p_gate, policy, run.form)
        critique = source.critique(run, rnd, tr) if rnd.critic_used else None
        p, rnd.source = p_right(rnd.features, rnd.p_gate, critique, policy)
        rnd.p_right = round(p, 4)
    tr.add("judgement", round=rnd.round, action=rnd.action, answer=rnd.answer, how=rnd.how or None,
           why=rnd.why or None, p_gate=rnd.p_gate,
           verdict=(rnd.critique or {}).get("verdict") if rnd.critic_used else None, p_right=rnd.p_right,
           source=rnd.source, accepted=rnd.p_right is not None and rnd.p_right >= policy.accept_for(run.form),
           **({"fallback": rnd.fallback} if rnd.fallback else {}))  # fmt: skip


# ---- the loop, once --------------------------------------------------------------------------------------
def play(question: str, form: Form, source: RoundSource, policy: Policy, tr: Tracer) -> Run:
    """The loop: the draft, then the repairs the decisions call for, each judged, until one stops it.
    ``source`` answers each action (live or from a recording); ``policy`` is the program's config (or
    :class:`Explore` for a recording)."""
    run = Run(question, form)
    action: str | None = "draft"
    while action is not None:
        rnd = source.read(run, action, policy, tr)  # type: ignore[arg-type]
        if needs_composer(run, rnd, policy):
            rnd.read = source.compose(run, rnd, tr)
        judge(run, rnd, source, policy, tr)
        run.rounds.append(rnd)
        action, why = next_step(run.rounds, form, policy, source.spent(policy, tr))
        run.stop = why or None
    return run


def conclude(run: Run, policy: Policy, tr: Tracer, **extra: Any) -> dspy.Prediction:
    """The prediction of a finished run: the selected round's answer, evidence and citations, and the trace."""
    best = select(run.rounds, policy)
    tr.add("select", round=best.round, action=best.action, answer=best.answer, how=best.how or None,
           p_right=best.p_right)  # fmt: skip
    return finish(
        SharpRAG.SYSTEM,
        tr,
        answer=best.answer if best.answer is not None else "unknown",
        passages=best.evidence,
        cited=best.cited_ids,
        sub_queries=best.sub_questions,
        queries=run.queries,
        retries=len(run.rounds) - 1,
        stop_reason=run.stop,
        **extra,
    )


class SharpRAG(dspy.Module):
    """The self-correcting multi-hop program, and the live source of its rounds. Predictors: planner,
    critic, generator, composer, focuser."""

    SYSTEM = "sharp"
    # the composer and the focused reader write answers with the generator's LM
    ROLE_MAP = {"composer": "generator", "focuser": "generator"}

    def __init__(self, retriever: Retriever, config: SharpConfig | None = None):
        super().__init__()
        self.config = config or SharpConfig()
        self.retriever = retriever
        self.planner = dspy.Predict(DecomposeQuestion)
        self.critic = dspy.Predict(CritiqueAnswer)
        self.generator = dspy.Predict(GenerateAnswer)
        self.composer = dspy.Predict(ComposeAnswer)
        self.focuser = dspy.Predict(ReadSecondHop)

    # ---- the live source ------------------------------------------------------------------------------
    def read(self, run: Run, action: Action, policy: Policy, tr: Tracer) -> Round:
        """Answer ``action`` for ``run`` with the LM; the round records its steps, calls and seconds."""
        n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
        round_no = len(run.rounds)
        make = {"draft": self._draft, "retrieve": self._retrieve, "compare": self._compare, "focus": self._focus}
        rnd = make[action](run, tr, round_no, policy)
        rnd.round = round_no
        rnd.steps, rnd.calls = tr.steps[n_steps:], _calls(tr, n_calls)
        rnd.seconds = round(time.perf_counter() - t0, 4)
        return rnd

    def critique(self, run: Run, rnd: Round, tr: Tracer) -> dict | None:
        cfg = self.config
        n_steps, n_calls = len(tr.steps), len(tr.ledger.records)
        pred, step = tr.call("critic", self.critic, {"question": run.question[:200], "n_passages": len(rnd.evidence)},
                             adapter=cfg.structured_adapter, config=cfg.critic_lm_config(), question=run.question,
                             evidence=format_evidence(rnd.evidence, cfg.passage_chars), draft_answer=rnd.answer)  # fmt: skip
        crit = read_critique(output_fields(pred, step), pred is not None, getattr(pred, "logprobs", None))
        step.update(round=rnd.round, draft_answer=rnd.answer, **crit)
        rnd.critique, rnd.critic_steps, rnd.critic_calls = crit, tr.steps[n_steps:], _calls(tr, n_calls)
        return crit

    def spent(self, policy: Policy, tr: Tracer) -> str | None:
        return tr.exhausted()

    # ---- rounds ----------------------------------------------------------------------------------------
    def _search(self, query: str, k: int, run: Run, tr: Tracer, round_no: int) -> list[Passage]:
        passages = self.retriever.retrieve(query, k)
        known = {p.id for p in run.rounds[0].evidence} if run.rounds else set()  # new: not in the draft's evidence
        tr.add("retriever", round=round_no, k=k, queries=[query], retrieved_ids=[[p.id for p in passages]],
               new_ids=[p.id for p in passages if p.id not in known])  # fmt: skip
        if query not in run.queries:
            run.queries.append(query)
        return passages

    def _read(self, q: str, evidence: list[Passage], tr: Tracer, round_no: int, focus: str | None = None) -> Read:
        cfg = self.config
        predictor, role, inputs = (self.generator, "generator", {}) if focus is None else (
            self.focuser, "focuser", {"intermediate": focus})  # fmt: skip
        answer, cited = answer_from_evidence(predictor, q, evidence, cfg.passage_chars, tr, role=role,
                                             adapter=cfg.generator_adapter, confidence=True, inputs=inputs)  # fmt: skip
        step = tr.steps[-1]
        step["round"] = round_no
        top = step.get("answer_top")
        return Read(q, answer, list(evidence), cited, step.get("answer_confidence"),
                    [(str(t), float(lp)) for t, lp in top] if top else None)  # fmt: skip

    def _draft(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """The ranked read: the top passages, or the sentences the selector keeps of them (the round keeps
        the whole passages as its evidence: what the answer is judged and written against)."""
        cfg = self.config
        if cfg.evidence == "passages":
            evidence = self._search(run.question, cfg.k_schedule[0], run, tr, round_no)
            return Round("draft", read=self._read(run.question, evidence, tr, round_no))
        passages = self._search(run.question, cfg.sentence_passages, run, tr, round_no)
        shown = select_sentences(run.question, passages, cfg.selector, cfg.sentence_budget)  # type: ignore[arg-type]
        read = self._read(run.question, shown, tr, round_no)
        tr.steps[-1]["sentences"] = sum(len(split_sentences(p.text)) for p in shown)
        read.evidence = list(passages)
        return Round("draft", read=read)

    @staticmethod
    def _entity_of(run: Run) -> str | None:
        """The entity the draft's reader named (not a yes/no, not "unknown"): what a retrieval repair adds to
        its search and a focused read goes through. The reader's own words, whatever the policy settled, so a
        recorded repair serves every policy."""
        draft = run.rounds[0].read if run.rounds else None
        answer = clean_answer(draft.answer, run.question) if draft else ""
        return answer if answer.lower() not in ("", "unknown", "yes", "no") else None

    def _retrieve(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """Search "QUESTION DRAFT" at the widest k, re-read the best passages of the searches so far."""
        cfg, q = self.config, run.question
        first = self._entity_of(run)
        query = f"{q} {first}" if first else q
        pool = EvidencePool()
        pool.add(q, run.rounds[0].evidence)
        pool.add(query, self._search(query, cfg.k_schedule[-1], run, tr, round_no))
        evidence = pool.select(max(cfg.evidence_cap, cfg.k_schedule[0]), "score")
        return Round("retrieve", read=self._read(q, evidence, tr, round_no), query=query)

    def _focus(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """Re-read for the second hop: the draft's entity's own passages first, the question restated
        through that entity (ReadSecondHop)."""
        cfg, q = self.config, run.question
        entity = self._entity_of(run)
        if entity is None:
            return Round("focus", fallback="the draft named no entity to read through")
        draft = run.rounds[0].evidence
        own = [p for p in draft if names_title(entity, p)]
        found = self._search(entity, cfg.sub_k, run, tr, round_no)
        seen: dict[str, Passage] = {}
        for p in [*own, *found, *draft]:
            seen.setdefault(p.id, p)
        evidence = list(seen.values())[: cfg.evidence_cap]
        return Round("focus", read=self._read(q, evidence, tr, round_no, focus=entity), query=entity)

    def _compare(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """The planner names the entities (the question's options where it has them) and writes one
        sub-question each (a choice of two dates the question names is planned by rule, with no LM call:
        program.forms.rule_sub_questions); each is read single-hop (the loop has the composer answer from
        the values only where the policy needs it: :func:`needs_composer`)."""
        cfg, q = self.config, run.question
        named = options(q)
        ruled = rule_sub_questions(q, named)
        if ruled is not None:  # a choice of two dates the question names: no LM call to plan it
            step = tr.add("planner", round=round_no, by_rule=True, lm_calls=0)
            fields: dict = {"entities": named, "sub_questions": ruled}
        else:
            pred, step = tr.call("planner", self.planner, {"question": q[:200]}, adapter=cfg.structured_adapter,
                                 config={"max_tokens": cfg.planner_max_tokens}, question=q, options=named)  # fmt: skip
            fields = output_fields(pred, step)
        asked = " ".join(q.lower().split())
        subs = [s for s in dict.fromkeys(items(fields.get("sub_questions"))) if " ".join(s.lower().split()) != asked]
        subs = subs[: cfg.max_sub_questions]
        checks = rule_checks(q, named) if len(subs) < 2 and len(named) == 2 else None
        if checks:  # the planner could not plan the choice: a check per option, written from the question
            subs = checks
            step["checks_by_rule"] = True
        entities = named or items(fields.get("entities"))[: len(subs)]
        step.update(round=round_no, entities=entities, sub_questions=subs)
        rnd = Round("compare", entities=entities, sub_questions=subs, planned=ruled is None and not named)
        if len(subs) < 2:
            rnd.fallback = f"the planner wrote {len(subs)} sub-question(s): the draft stands"
        elif run.form == "comparison" and len(entities) != len(subs):
            rnd.fallback = f"{len(entities)} entities for {len(subs)} sub-questions: the draft stands"
        if rnd.fallback:
            step["fallback"] = rnd.fallback
            return rnd
        if len(entities) != len(subs):  # a yes/no question: the values decide, not the names
            rnd.entities = subs
        for sub in subs:
            rnd.values.append(self._read(sub, self._search(sub, cfg.sub_k, run, tr, round_no), tr, round_no))
        return rnd

    def compose(self, run: Run, rnd: Round, tr: Tracer) -> Read:
        """The composer's answer from a comparison's values; its steps, calls and seconds kept apart on the
        round (a policy that decides in code does not make this call)."""
        n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
        read = self._compose(run.question, rnd, tr, rnd.round)
        rnd.compose_steps, rnd.compose_calls = tr.steps[n_steps:], _calls(tr, n_calls)
        rnd.compose_seconds = round(time.perf_counter() - t0, 4)
        return read

    def _compose(self, q: str, rnd: Round, tr: Tracer, round_no: int) -> Read:
        cfg = self.config
        facts = [f"{s} -> {v.answer}" for s, v in zip(rnd.sub_questions, rnd.values)]
        pred, step = tr.call("composer", self.composer, {"question": q[:200], "facts": len(facts)},
                             adapter=cfg.generator_adapter, question=q, facts=facts,
                             config={"max_tokens": cfg.compose_max_tokens, "logprobs": True,
                                     "top_logprobs": TOP_LOGPROBS})  # fmt: skip
        record_confidence(step, pred)
        answer = clean_answer(output_fields(pred, step).get("answer"), q) or "unknown"
        step.update(round=round_no, facts=facts, answer=answer)
        top = step.get("answer_top")
        return Read(q, answer, [], [], step.get("answer_confidence"),
                    [(str(t), float(lp)) for t, lp in top] if top else None)  # fmt: skip

    # ---- a question ---------------------------------------------------------------------------------------
    def run(self, q: str, tr: Tracer) -> Run:
        """The loop over this program's live rounds, as the config's policy says."""
        return play(q, question_form(q), self, self.config, tr)

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            run = self.run(q, tr)
            return conclude(run, cfg, tr)


def _calls(tr: Tracer, mark: int) -> list[dict]:
    return [r.to_dict() for r in tr.ledger.records[mark:]]
