"""SHARP: draft -> judge -> (repair -> judge)* -> the most confident round's answer.

1. **Draft.** The question is searched once (the evidence ranker orders the pool) and the generator reads
   the top ``k_schedule[0]`` passages: the call one ranked pass makes anyway, here with its answer tokens'
   log-probabilities.
2. **Judge.** The answer critic gives P(the draft is right): the *gate*, a calibrated logistic regression
   over what the round knows without another LM call (program/calibration.py); where the policy asks for
   it, the critic LM (CritiqueAnswer) reads question, evidence and draft and its verdict's P(supported)
   joins the features (the *judge*). A confident draft ends the loop.
3. **Repair.** A rejected draft gets the round its form and critique call for (:func:`next_step`):
   ``retrieve`` searches "QUESTION DRAFT" at the wider k and re-reads the ranked pool (the draft often
   names the bridge entity whose page was missing); ``decompose`` (comparisons, yes/no questions) has the
   planner write one sub-question per entity, reads each as a single-hop question, and composes the answer
   from the values read. Each repair is judged like the draft.
4. **Select.** The answer is the round with the highest calibrated P(right), not always the last.

The loop is written once, :meth:`SharpRAG.run`; its decisions are the pure functions :func:`wants_critic`,
:func:`p_right`, :func:`next_step` and :func:`select`, which :mod:`optimize.replay` applies to recorded
rounds, so the policy tuned by replay is the policy that runs. Every exit returns an answer and a trace.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import dspy
from pydantic import Field, field_validator, model_validator

from program.answers import clean_answer
from program.calibration import AnswerCalibrator, critic_features, draft_features
from program.config import StrictConfig
from program.critique import VERDICTS, critic_lm_config, output_fields, read_critique
from program.evidence import EvidencePool, format_evidence
from program.forms import Form, options, question_form
from program.generation import answer_from_evidence, record_confidence
from program.parsing import items
from program.retrieval.base import Retriever
from program.signatures import ComposeAnswer, CritiqueAnswer, DecomposeQuestion, GenerateAnswer
from program.steps import Budget, Tracer, finish, traced
from program.types import Passage

__all__ = [
    "POLICY_FIELDS",
    "TUNED_FIELDS",
    "VERDICTS",
    "SharpConfig",
    "SharpRAG",
    "gate_probability",
    "next_step",
    "p_right",
    "select",
    "wants_critic",
]

Repair = Literal["retrieve", "decompose"]
REPAIRS: tuple[Repair, ...] = ("retrieve", "decompose")
# the settings that decide which rounds a run reaches and which answer it returns, never what a round reads:
# replay varies them over one recording (optimize/replay.py), `sharp tune` searches those of TUNED_FIELDS
TUNED_FIELDS = (
    "accept_threshold",
    "accept_comparison",
    "accept_yesno",
    "critic",
    "critic_floor",
    "max_repairs",
    "repair_bridge",
    "repair_comparison",
    "repair_yesno",
    "select",
)
POLICY_FIELDS = (*TUNED_FIELDS, "gate", "judge", "budget")
# what a round's P(right) is without a fitted gate: the answer tokens' geometric-mean probability, or a coin
# flip when the LM returned no log-probabilities
UNCALIBRATED_P = 0.5


class SharpConfig(StrictConfig):
    """Everything an optimizer may tune, validated."""

    # k of the draft's search, then of a retrieval repair's ("QUESTION DRAFT"): three ranked passages read
    # best for the 1.5B reader; a repair widens to five (experiments/RESULTS.md, 'Reading')
    # the evidence ranker the searches go through (its probabilities are features of the answer critic): a
    # ranker's name, "dataset" for the dataset's own (experiments/rankers.py), or None for plain hybrid search
    ranker: str | None = "dataset"
    k_schedule: tuple[int, ...] = (3, 5)
    evidence_cap: int = Field(5, ge=1, le=40)  # a re-read reads at most this many passages of the pool
    passage_chars: int = Field(600, ge=50, le=5000)
    # stop when a round's P(right) reaches this; `sharp tune` searches it
    accept_threshold: float = Field(0.8, ge=0.0, le=1.0)
    # the same for comparisons and yes/no questions, where their drafts fail otherwise (None: accept_threshold)
    accept_comparison: float | None = Field(None, ge=0.0, le=1.0)
    accept_yesno: float | None = Field(None, ge=0.0, le=1.0)
    # when the critic LM reads a draft: never, on every draft, or in the band [critic_floor, accept_threshold)
    # of the gate's P (the gate alone accepts above it; below the floor the draft is repaired unread). Off by
    # default: the 1.5B critic's verdict did not tell right drafts from wrong ones on held-out train drafts
    # (experiments/RESULTS.md, 'The answer critic'); `sharp tune` can turn it on where it pays
    critic: Literal["off", "band", "always"] = "off"
    critic_floor: float = Field(0.0, ge=0.0, le=1.0)
    max_repairs: int = Field(2, ge=0, le=len(REPAIRS))
    # the repairs a rejected draft gets, in order, by the question's form (program/forms.py)
    repair_bridge: tuple[Repair, ...] = ("retrieve",)
    repair_comparison: tuple[Repair, ...] = ("decompose", "retrieve")
    repair_yesno: tuple[Repair, ...] = ("decompose", "retrieve")
    # the answer: the round with the highest P(right) ("confidence"), or the last round's ("last")
    select: Literal["confidence", "last"] = "confidence"
    gate: AnswerCalibrator | None = None  # P(right) without the critic; fitted by `sharp compile --target critic`
    judge: AnswerCalibrator | None = None  # P(right) with the critic's verdict; fitted alike
    max_sub_questions: int = Field(3, ge=2, le=5)
    sub_k: int = Field(2, ge=1, le=10)  # passages a sub-question of a decomposed read is answered from
    structured_adapter: Literal["chat", "json"] = "json"
    generator_adapter: Literal["chat", "json"] = "json"
    planner_max_tokens: int = Field(128, ge=16, le=4096)
    critic_max_tokens: int = Field(160, ge=16, le=4096)
    compose_max_tokens: int = Field(64, ge=8, le=1024)
    max_question_chars: int = Field(2000, ge=50)
    budget: Budget = Budget(max_lm_calls=8)

    @field_validator("k_schedule")
    @classmethod
    def _schedule(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(k < 1 for k in v) or list(v) != sorted(v):
            raise ValueError(f"k_schedule must be a non-empty, non-decreasing list of k >= 1, got {list(v)}")
        return tuple(v)

    @field_validator("repair_bridge", "repair_comparison", "repair_yesno")
    @classmethod
    def _repairs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"a repair is listed twice: {list(v)}")
        return tuple(v)

    @model_validator(mode="after")
    def _consistent(self) -> SharpConfig:
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

    def critic_lm_config(self) -> dict:
        return critic_lm_config(self.critic_max_tokens)


# ---- the loop's decisions: pure, the same live and in replay ----------------------------------------------
def gate_probability(features: dict[str, float], policy: Any) -> float:
    """P(right) of a draft without the critic: the fitted gate, else the answer tokens' geometric mean."""
    if policy.gate is not None:
        return policy.gate.probability(features)
    if features.get("lp_missing"):
        return UNCALIBRATED_P
    return math.exp(features["lp_mean"])


def wants_critic(p_gate: float, policy: Any, form: Form = "bridge") -> bool:
    """Whether the critic LM reads a draft of a ``form`` question whose gate probability is ``p_gate``."""
    if policy.critic == "always":
        return True
    return policy.critic == "band" and policy.critic_floor <= p_gate < policy.accept_for(form)


def p_right(features: dict[str, float], p_gate: float, critique: dict | None, policy: Any) -> tuple[float, str]:
    """A round's P(right) and where it came from: the judge (gate features and the critic's verdict), the
    critic's own P(supported) when no judge is fitted, else the gate (also when the critique was discarded)."""
    extra = critic_features(critique)
    if extra is None:
        return p_gate, "gate"
    if policy.judge is not None:
        return policy.judge.probability({**features, **extra}), "judge"
    return extra["p_supported"], "critic"


def next_step(rounds: Sequence[dict], form: Form, policy: Any, spent: str | None = None) -> tuple[str | None, str]:
    """After a judged round: (the repair to run next, "") or (None, why the loop stops): "confident" when
    a round reached the threshold, "budget_*" when a budget is spent, "max_repairs", or "no_repair_left"
    (every repair for the question's form was tried). A critique that calls the evidence incomplete moves
    the retrieval repair first."""
    if max(r["p_right"] for r in rounds if r["p_right"] is not None) >= policy.accept_for(form):
        return None, "confident"
    if spent is not None:
        return None, f"budget_{spent}"
    if len(rounds) - 1 >= policy.max_repairs:
        return None, "max_repairs"
    done = {r["action"] for r in rounds}
    plan = [a for a in policy.repairs_for(form) if a not in done]
    last = (rounds[-1].get("critique") or {}).get("verdict")
    if last == "incomplete" and "retrieve" in plan:
        plan = ["retrieve", *(a for a in plan if a != "retrieve")]
    return (plan[0], "") if plan else (None, "no_repair_left")


def select(rounds: Sequence[dict], policy: Any) -> dict:
    """The round whose answer is returned: the most confident (the earliest on a tie), or the last; rounds
    without an answer (a decomposed read that fell back) are never chosen."""
    answered = [r for r in rounds if r.get("answer") is not None]
    if policy.select == "last":
        return answered[-1]
    return max(answered, key=lambda r: (r["p_right"], -r["round"]))


# ---- one question's run ------------------------------------------------------------------------------------
@dataclass
class Run:
    """One question's loop: its form, the pool, the judged rounds and how it ended."""

    question: str
    form: Form
    pool: EvidencePool = field(default_factory=EvidencePool)
    rounds: list[dict] = field(default_factory=list)
    stop: str | None = None


@dataclass(frozen=True)
class Explore:
    """The policy of a recording: every repair for the question's form, each round critiqued."""

    critic: str = "always"
    critic_floor: float = 0.0

    def accept_for(self, form: Form) -> float:
        return 2.0  # above every probability: no round is accepted, every repair runs


class SharpRAG(dspy.Module):
    """The self-correcting multi-hop program. Predictors: planner, critic, generator, composer."""

    SYSTEM = "sharp"
    ROLE_MAP = {"composer": "generator"}  # the composer writes the answer with the generator's LM

    def __init__(self, retriever: Retriever, config: SharpConfig | None = None):
        super().__init__()
        self.config = config or SharpConfig()
        self.retriever = retriever
        self.planner = dspy.Predict(DecomposeQuestion)
        self.critic = dspy.Predict(CritiqueAnswer)
        self.generator = dspy.Predict(GenerateAnswer)
        self.composer = dspy.Predict(ComposeAnswer)

    # ---- rounds ----------------------------------------------------------------------------------------
    def _search(self, query: str, k: int, pool: EvidencePool, tr: Tracer, round_no: int, role: str = "retriever"):
        passages = self.retriever.retrieve(query, k)
        new = pool.add(query, passages)
        tr.add(role, round=round_no, k=k, queries=[query], retrieved_ids=[[p.id for p in passages]],
               new_ids=[p.id for p in new])  # fmt: skip
        return passages

    def _read(self, q: str, evidence: list[Passage], tr: Tracer) -> tuple[str, list[str], dict]:
        cfg = self.config
        answer, cited = answer_from_evidence(
            self.generator, q, evidence, cfg.passage_chars, tr, adapter=cfg.generator_adapter, confidence=True
        )
        return answer, cited, tr.steps[-1]

    def _draft(self, run: Run, tr: Tracer) -> dict:
        k = self.config.k_schedule[0]
        evidence = self._search(run.question, k, run.pool, tr, 0)
        answer, cited, gen = self._read(run.question, evidence, tr)
        return {"action": "draft", "answer": answer, "cited_ids": cited, "evidence": evidence,
                "confidence": gen.get("answer_confidence")}  # fmt: skip

    def _retrieve(self, run: Run, tr: Tracer, round_no: int) -> dict:
        """Search "QUESTION DRAFT" at the widest k, re-read the pool's best passages."""
        cfg = self.config
        first = run.rounds[0]["answer"]
        usable = first and clean_answer(first, run.question).lower() not in ("", "unknown", "yes", "no")
        query = f"{run.question} {first}" if usable else run.question
        self._search(query, cfg.k_schedule[-1], run.pool, tr, round_no)
        evidence = run.pool.select(max(cfg.evidence_cap, cfg.k_schedule[0]), "score")
        answer, cited, gen = self._read(run.question, evidence, tr)
        return {"action": "retrieve", "answer": answer, "cited_ids": cited, "evidence": evidence,
                "confidence": gen.get("answer_confidence"), "query": query}  # fmt: skip

    def _decompose(self, run: Run, tr: Tracer, round_no: int) -> dict:
        """One sub-question per entity, each read as a single-hop question, the answer composed from the
        values; a sub-question with no value makes the round fall back (no answer: the direct read stands)."""
        cfg, q = self.config, run.question
        named = options(q)
        pred, step = tr.call("planner", self.planner, {"question": q[:200]}, adapter=cfg.structured_adapter,
                             config={"max_tokens": cfg.planner_max_tokens}, question=q, entities=named)  # fmt: skip
        asked = " ".join(q.lower().split())
        subs = [
            s
            for s in dict.fromkeys(items(output_fields(pred, step).get("sub_questions")))
            if " ".join(s.lower().split()) != asked
        ]
        subs = subs[: cfg.max_sub_questions]
        step.update(round=round_no, sub_questions=subs)
        out: dict[str, Any] = {"action": "decompose", "answer": None, "cited_ids": [], "evidence": [],
                               "confidence": None, "sub_questions": subs, "values": []}  # fmt: skip
        if len(subs) < 2:
            out["fallback"] = f"the planner wrote {len(subs)} sub-question(s): the direct read stands"
            return out
        evidence: dict[str, Passage] = {}
        own = EvidencePool()  # not the run's pool: a retrieval repair reads the same pool before or after this round
        for sub in subs:
            passages = self._search(sub, cfg.sub_k, own, tr, round_no)
            value, _, _ = self._read(sub, passages, tr)
            out["values"].append(value)
            evidence.update((p.id, p) for p in passages)
            if clean_answer(value, sub).lower() in ("", "unknown"):
                out["fallback"] = f"no value read for {sub!r}: the direct read stands"
                return out
        facts = [f"{s} -> {v}" for s, v in zip(subs, out["values"])]
        pred, step = tr.call("composer", self.composer, {"question": q[:200], "facts": len(facts)},
                             adapter=cfg.generator_adapter, question=q, facts=facts,
                             config={"max_tokens": cfg.compose_max_tokens, "logprobs": True, "top_logprobs": 1})  # fmt: skip
        record_confidence(step, pred)
        answer = clean_answer(output_fields(pred, step).get("answer"), q) or "unknown"
        step.update(round=round_no, facts=facts, answer=answer)
        out.update(answer=answer, evidence=list(evidence.values()), confidence=step.get("answer_confidence"))
        return out

    def _critique(self, run: Run, rnd: dict, tr: Tracer) -> dict:
        cfg = self.config
        evidence = rnd["evidence"]
        pred, step = tr.call("critic", self.critic, {"question": run.question[:200], "n_passages": len(evidence)},
                             adapter=cfg.structured_adapter, config=cfg.critic_lm_config(), question=run.question,
                             evidence=format_evidence(evidence, cfg.passage_chars), draft_answer=rnd["answer"])  # fmt: skip
        crit = read_critique(output_fields(pred, step), pred is not None, getattr(pred, "logprobs", None))
        step.update(round=rnd["round"], draft_answer=rnd["answer"], **crit)
        return crit

    def _judge(self, run: Run, rnd: dict, tr: Tracer, policy: Any) -> None:
        """Features, gate, critic (where the policy wants it) and P(right) of a finished round, in place."""
        first = run.rounds[0]["answer"] if run.rounds else None
        if rnd["answer"] is None:
            rnd.update(features=None, p_gate=None, critique=None, p_right=None, source=None)
        else:
            feats = draft_features(
                run.question, rnd["answer"], rnd["evidence"], rnd["confidence"], rnd["action"], first
            )
            rnd["features"] = {k: round(v, 4) for k, v in feats.items()}
            rnd["p_gate"] = round(gate_probability(rnd["features"], self.config), 4)
            n_steps, n_calls = len(tr.steps), len(tr.ledger.records)
            rnd["critique"] = self._critique(run, rnd, tr) if wants_critic(rnd["p_gate"], policy, run.form) else None
            rnd["critic_steps"], rnd["critic_calls"] = tr.steps[n_steps:], _calls(tr, n_calls)
            p, source = p_right(rnd["features"], rnd["p_gate"], rnd["critique"], self.config)
            rnd.update(p_right=round(p, 4), source=source)
        tr.add("judgement", round=rnd["round"], action=rnd["action"], answer=rnd["answer"], p_gate=rnd["p_gate"],
               verdict=(rnd["critique"] or {}).get("verdict"), p_right=rnd["p_right"], source=rnd["source"],
               accepted=rnd["p_right"] is not None and rnd["p_right"] >= policy.accept_for(run.form),
               **({"fallback": rnd["fallback"]} if rnd.get("fallback") else {}))  # fmt: skip

    def _round(self, run: Run, action: str, tr: Tracer, policy: Any) -> dict:
        n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
        round_no = len(run.rounds)
        make = {"draft": self._draft, "retrieve": self._retrieve, "decompose": self._decompose}[action]
        rnd = make(run, tr) if action == "draft" else make(run, tr, round_no)
        rnd.update(round=round_no, steps=tr.steps[n_steps:], calls=_calls(tr, n_calls),
                   seconds=round(time.perf_counter() - t0, 4))  # fmt: skip
        self._judge(run, rnd, tr, policy)
        run.rounds.append(rnd)
        return rnd

    # ---- the loop ----------------------------------------------------------------------------------------
    def run(self, q: str, tr: Tracer, explore: bool = False, critique: bool = True) -> Run:
        """The loop, once. Live: as the config's policy says. Explore (a recording for replay): every
        repair for the question's form, no early stop, every round critiqued (none with ``critique``
        False: such a record replays only policies that never ask the critic)."""
        cfg = self.config
        policy = (Explore() if critique else Explore(critic="off")) if explore else cfg
        run = Run(q, question_form(q))
        self._round(run, "draft", tr, policy)
        while True:
            if explore:
                todo = [a for a in cfg.repairs_for(run.form) if a not in {r["action"] for r in run.rounds}]
                action, run.stop = (todo[0], None) if todo else (None, "explored")
            else:
                action, why = next_step(run.rounds, run.form, cfg, tr.exhausted())
                run.stop = why or None
            if action is None:
                return run
            self._round(run, action, tr, policy)

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            run = self.run(q, tr)
            best = select(run.rounds, cfg)
            tr.add("select", round=best["round"], action=best["action"], answer=best["answer"], p_right=best["p_right"])
        return finish(
            self.SYSTEM,
            tr,
            answer=best["answer"],
            passages=best["evidence"],
            cited=best["cited_ids"],
            sub_queries=best.get("sub_questions") or [],
            queries=list(run.pool.by_query),
            retries=len(run.rounds) - 1,
            stop_reason=run.stop,
        )


def _calls(tr: Tracer, mark: int) -> list[dict]:
    return [r.to_dict() for r in tr.ledger.records[mark:]]
