"""SHARP: draft -> judge -> (repair -> judge)* -> the most confident round's answer.

1. **Draft.** The question is searched once (the evidence ranker orders the pool) and the generator reads the
   top ``k_schedule[0]`` passages: the call one ranked pass makes anyway, here with its answer tokens'
   log-probabilities (and, at the first token, the alternatives it weighed: P("yes") against P("no")).
2. **Settle.** Code settles what the reads say (:func:`settle`, no LM call): a yes/no question from the
   reader's own P("yes") against a threshold fitted on train; a comparison from values parsed and compared in
   Python (program/sharp/values.py); a chosen option written as the question or its passage writes it; a span as
   the passage writes it (program/sharp/spans.py).
3. **Judge.** The answer critic gives P(the answer is right): the *gate*, a calibrated logistic regression
   over what the round knows without another LM call (program/sharp/gate.py: the reader's confidence, the
   answer's type against what the question asks, whether it names the intermediate entity, the yes/no
   margin, agreement with the draft); where the policy asks for it, the critic LM (CritiqueAnswer) reads
   question, evidence and answer and its P(supported) joins (the *judge*). A confident round ends the loop.
4. **Repair.** A rejected round gets the repair its form calls for (:func:`next_step`): ``compare``
   (comparisons, yes/no questions about several entities) has the planner name the entities and write one
   sub-question each, reads each value single-hop and decides in code (the LM composes only what does not
   parse); ``focus`` (bridges) re-reads the draft's entity's own passage with the question restated for the
   second hop; ``retrieve`` searches "QUESTION DRAFT" at the wider k and re-reads the ranked pool.
5. **Select.** The answer is the round with the highest calibrated P(right), not always the last.

The loop is written once, :func:`play`, over a :class:`~program.sharp.rounds.RoundSource`: this program answering
live, or a recording (program/sharp/rounds.py: :class:`~program.sharp.rounds.RecordedRounds`) in replay, so the policy
`sharp tune` scores by replay is the policy that runs. Every exit returns an answer and a trace.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import dspy

from program.reading.answers import is_yes_no_question
from program.sharp.answer_types import asked_type, mismatch
from program.sharp.chain import hop1_p
from program.sharp.forms import Form, matches_option, options
from program.sharp.gate import critic_features, round_features
from program.sharp.policy import UNCALIBRATED_P, Policy
from program.sharp.rounds import Read, Round, RoundSource, Run
from program.sharp.spans import closest_span, names_title, passage_name, words
from program.sharp.values import decide
from program.tracing import Tracer, finish
from program.types import Passage

__all__ = [
    "SYSTEM",
    "gate_probability",
    "wants_critic",
    "p_right",
    "flagged",
    "next_step",
    "repairable",
    "select",
    "settle",
    "needs_composer",
    "assess",
    "Settled",
    "play",
    "conclude",
]


class Settled(NamedTuple):
    """A round's answer as code settles it from the reads, how (read, p_yes, code, composed, chain, union,
    option, forced, span) and code's reason."""

    answer: str | None
    how: str
    why: str


# the system name a SHARP prediction carries (SharpRAG.SYSTEM)
SYSTEM = "sharp"


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
    if rnd.read is None or rnd.action in ("compare", "chain"):
        return False
    answer, asked = rnd.read.answer, set(words(run.question))
    return mismatch(run.question, answer) or any(
        names_title(answer, p) and not set(words(p.title)) <= asked for p in rnd.read.evidence
    )


def repairable(policy: Policy, form: Form) -> bool:
    """Whether the policy can repair a question of ``form`` at all (else its P(right) decides nothing)."""
    return policy.max_repairs > 0 and bool(policy.repairs_for(form))


def next_step(rounds: Sequence[Round], form: Form, policy: Policy, spent: str | None = None) -> tuple[str | None, str]:
    """After a judged round: (the repair to run next, "") or (None, why the loop stops), in this order:
    "max_repairs" (the repair cap: none allowed, or as many as allowed ran), "no_repair_for_form" (the policy
    gives the question's form no repair: its P(right) decided nothing), "confident" (a round's P(right) reached
    the form's threshold), "budget_*" (a budget is spent), "no_repair_left" (every repair for the form was
    tried, or none fits). A critique that calls the evidence incomplete moves the retrieval repair first; a
    focused read needs a flagged draft under ``focus_when="flagged"``."""
    if policy.max_repairs == 0:
        return None, "max_repairs"
    if not policy.repairs_for(form):
        return None, "no_repair_for_form"
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


def settle(run: Run, rnd: Round, policy: Policy) -> Settled:
    """The round's answer as code settles it from its reads: a yes/no question decided from P("yes"), a
    comparison from its values, a chain from its last hop (or its union read), an option or a span written as
    the question or the passage writes it. Pure (the round is not changed): the same live and in replay."""
    if rnd.action == "compare":
        answer, how, why = _compared(run, rnd, policy)
    elif rnd.action == "chain":
        answer, how, why = _chained(rnd, policy)
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
    if answer is not None and policy.place_rule == "first" and "," in answer and asked_type(run.question) == "place":
        first = answer.split(",", 1)[0].strip()
        if len(first) > 1 and not any(ch.isdigit() for ch in first):
            answer, how, why = first, "place", f"{answer!r}: the place's first part"
    return Settled(answer, how, why)


def _chained(rnd: Round, policy: Policy) -> tuple[str | None, str, str]:
    """A chain round's answer: its last hop's (as the passage writes it), or its read of the whole question over
    the hops' passages (``chain_answer: union``); none where a hop stopped the chain."""
    if rnd.fallback or not rnd.hop_answers or len(rnd.hop_answers) != len(rnd.hops):
        return None, "", rnd.fallback or "no hop read"
    if policy.chain_answer == "union":
        if rnd.read is None or rnd.read.answer.lower() in ("", "unknown"):
            return None, "", "the union read answered nothing"
        return rnd.read.answer, "union", ""
    return rnd.hop_answers[-1], "chain", f"hop {len(rnd.hops)} of {len(rnd.hops)}"


def needs_composer(run: Run, rnd: Round, policy: Policy) -> bool:
    """Whether a comparison round's answer needs the composer: its values read, and code cannot decide from
    them (or the policy always composes)."""
    if rnd.action == "chain":
        return not rnd.fallback and bool(rnd.hop_answers) and rnd.read is None and policy.chain_answer == "union"
    if rnd.action != "compare" or rnd.fallback or not rnd.values or rnd.read is not None:
        return False
    return policy.compare_by == "composer" or settle(run, rnd, policy).how != "code"


def beams(rnd: Round, policy: Policy) -> bool:
    """Whether a chain round carries hop 1's second answer (``chain_beam``): hop 1 answered, its first token's
    probability at or below the policy's beam threshold."""
    threshold = getattr(policy, "chain_beam", None)
    return threshold is not None and rnd.action == "chain" and bool(rnd.hop_answers) and hop1_p(rnd) <= threshold


def _finished(rnd: Round) -> bool:
    return not rnd.fallback and rnd.plan is not None and len(rnd.hop_answers) == len(rnd.plan["hops"])


def _gate_p(run: Run, rnd: Round, policy: Policy) -> float:
    """The gate's P(right) of a chain's answer as the policy settles it (-1 where it settles none)."""
    settled = settle(run, rnd, policy)
    if settled.answer is None:
        return -1.0
    features = round_features(run, replace(rnd, answer=settled.answer, how=settled.how))
    return gate_probability(features, policy)


def carry_beam(run: Run, rnd: Round, source: RoundSource, policy: Policy, tr: Tracer) -> None:
    """Read the chain's second branch (``source.branch``) and answer from it where it beats the first chain: the
    first stopped and the branch finished, or both finished and the gate trusts the branch more (a tie keeps the
    first). With ``chain_answer: union`` (a recording's explore policy) the branch is read, never taken: the
    union read answers from the first chain's passages."""
    alt = source.branch(run, rnd, tr)
    first_p = branch_p = None
    if alt is None:
        chose, why = "first", "no second hop-1 answer"
    elif not _finished(alt):
        chose, why = "first", f"the branch stopped ({alt.fallback})"
    elif not _finished(rnd):
        chose, why = "branch", "the first chain stopped"
    else:
        first_p, branch_p = round(_gate_p(run, rnd, policy), 4), round(_gate_p(run, alt, policy), 4)
        chose, why = ("branch", "the gate trusts it more") if branch_p > first_p else ("first", "the gate's P")
    if chose == "branch" and policy.chain_answer == "union":
        chose, why = "first", "read for a replay (the union read answers from the first chain)"
    tr.add("chain", round=rnd.round, beam=chose, why=why, hop1=[rnd.hop_answers[0], *(alt.hop_answers[:1] if alt else [])],
           p_gate=[first_p, branch_p] if first_p is not None else None)  # fmt: skip
    if chose == "branch":
        rnd.take_branch()


def assess(run: Run, rnd: Round, source: RoundSource, policy: Policy, tr: Tracer) -> None:
    """Settle a read round, then its features, gate, critic (where the policy wants it) and P(right), in
    place; a judgement step records the outcome."""
    rnd.answer, rnd.how, rnd.why = settle(run, rnd, policy)
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
           repairable=repairable(policy, run.form),
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
        if beams(rnd, policy):
            carry_beam(run, rnd, source, policy, tr)
        if needs_composer(run, rnd, policy):
            rnd.read = source.compose(run, rnd, tr)
        assess(run, rnd, source, policy, tr)
        run.rounds.append(rnd)
        action, why = next_step(run.rounds, form, policy, source.spent(policy, tr))
        run.stop = why or None
    return run


def conclude(run: Run, policy: Policy, tr: Tracer, **extra: Any) -> dspy.Prediction:
    """The prediction of a finished run: the selected round's answer, evidence and citations, and the trace."""
    best = select(run.rounds, policy)
    tr.add("select", round=best.round, action=best.action, answer=best.answer, how=best.how or None,
           p_right=best.p_right, threshold=policy.accept_for(run.form),
           repairable=repairable(policy, run.form))  # fmt: skip
    return finish(
        SYSTEM,
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
