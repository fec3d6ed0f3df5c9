"""SHARP: plan -> retrieve -> critique -> (targeted re-retrieval with a widening k)* -> generate."""

from __future__ import annotations

from typing import Any, Literal

import dspy
from pydantic import Field, field_validator, model_validator

from program.confidence import (
    DEFAULT_CONFIDENCE_THRESHOLD,
    TOP_LOGPROBS,
    UNKNOWN_P_SUFFICIENT,
    choice_probabilities,
    verbal_p_sufficient,
)
from program.config import StrictConfig
from program.evidence import EvidencePool, format_evidence
from program.generation import answer_from_evidence
from program.parsing import as_score, items
from program.retrieval.base import Retriever
from program.signatures import CritiqueEvidence, GenerateAnswer, PlanSubQueries
from program.steps import Budget, Tracer, traced
from program.types import Passage


class SharpConfig(StrictConfig):
    """Everything an optimizer may tune, validated."""

    k_schedule: tuple[int, ...] = (3, 5, 7)
    # stop when P(sufficient) >= this: 0.35 separated complete from incomplete evidence best (accuracy
    # 0.69) on 16 balanced train pairs (critic_discrimination benchmark); `sharp tune` searches it
    confidence_threshold: float = Field(DEFAULT_CONFIDENCE_THRESHOLD, ge=0.0, le=1.0)
    max_retries: int = Field(2, ge=0, le=10)
    evidence_cap: int = Field(6, ge=1, le=40)
    passage_chars: int = Field(600, ge=50, le=5000)  # as plain RAG: 450 cut the answer from 4% of gold paragraphs
    max_sub_queries: int = Field(3, ge=1, le=8)
    queries_per_retry: int = Field(2, ge=1, le=6)
    include_question: bool = True
    critic_reasoning: bool = False
    # "token": P(sufficient) read from the critic's token probabilities where the LM returns them
    # (program/confidence.py), else its written confidence; "verbal": always the written confidence
    critic_confidence: Literal["token", "verbal"] = "token"
    generator_reasoning: bool = False
    structured_adapter: Literal["chat", "json"] = "json"
    generator_adapter: Literal["chat", "json"] = "json"
    planner_max_tokens: int = Field(160, ge=16, le=4096)
    critic_max_tokens: int = Field(256, ge=16, le=4096)
    max_question_chars: int = Field(2000, ge=50)
    budget: Budget = Budget()

    @field_validator("k_schedule")
    @classmethod
    def _schedule(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(k < 1 for k in v) or list(v) != sorted(v):
            raise ValueError(f"k_schedule must be a non-empty, non-decreasing list of k >= 1, got {list(v)}")
        return tuple(v)

    @model_validator(mode="after")
    def _consistent(self) -> SharpConfig:
        if self.evidence_cap < self.k_schedule[0]:
            raise ValueError(f"evidence_cap ({self.evidence_cap}) is below the first k ({self.k_schedule[0]})")
        return self

    def k_for_round(self, round_no: int) -> int:
        return self.k_schedule[min(round_no, len(self.k_schedule) - 1)]


class SharpRAG(dspy.Module):
    """The self-correcting multi-hop program. Predictors: planner, critic, generator."""

    SYSTEM = "sharp"

    def __init__(self, retriever: Retriever, config: SharpConfig | None = None):
        super().__init__()
        self.config = config or SharpConfig()
        self.retriever = retriever
        self.planner = dspy.Predict(PlanSubQueries)
        self.critic = (dspy.ChainOfThought if self.config.critic_reasoning else dspy.Predict)(CritiqueEvidence)
        self.generator = (dspy.ChainOfThought if self.config.generator_reasoning else dspy.Predict)(GenerateAnswer)

    # ---- steps -------------------------------------------------------------------------------
    def _plan(self, q: str, tr: Tracer) -> list[str]:
        pred, step = tr.call(
            "planner",
            self.planner,
            {"question": q[:200]},
            adapter=self.config.structured_adapter,
            config={"max_tokens": self.config.planner_max_tokens},
            question=q,
        )
        # a planner looping in its list is cut by max_tokens: the queries before the cut still count
        fields = _fields(pred, step)
        planned = list(dict.fromkeys(items(fields.get("sub_queries"))))
        if step.get("salvaged"):  # the last query may be cut mid-word: drop a prefix of another query
            planned = [p for p in planned if not any(o != p and o.startswith(p) for o in planned)]
        planned = planned[: self.config.max_sub_queries]
        step["sub_queries"] = planned
        queries = ([q] if self.config.include_question else []) + planned
        if not queries:  # the planner failed and the question is not included: search the question
            queries = [q]
            step["fallback"] = "question used as the only query"
        return list(dict.fromkeys(queries))

    def _retrieve(self, queries: list[str], k: int, pool: EvidencePool, tr: Tracer, round_no: int) -> list[Passage]:
        results = self.retriever.retrieve_many(queries, k)
        new: list[Passage] = []
        for query, passages in zip(queries, results):
            new += pool.add(query, passages)
        tr.add(
            "retriever",
            round=round_no,
            k=k,
            queries=queries,
            retrieved_ids=[[p.id for p in ps] for ps in results],
            new_ids=[p.id for p in new],
        )
        return new

    def _critique(self, q: str, pool: EvidencePool, tr: Tracer, round_no: int) -> dict:
        cfg = self.config
        evidence = pool.select(cfg.evidence_cap)
        pred, step = tr.call(
            "critic",
            self.critic,
            {"question": q[:200], "n_passages": len(evidence)},
            adapter=cfg.structured_adapter,
            config=critic_lm_config(cfg),
            question=q,
            sub_queries=list(pool.by_query),
            evidence=format_evidence(evidence, cfg.passage_chars),
        )
        crit = read_critique(
            _fields(pred, step), pred is not None, getattr(pred, "logprobs", None), cfg.critic_confidence
        )
        crit["critic_stop"] = critic_stops(crit, cfg.confidence_threshold)
        step.update(
            round=round_no, evidence_ids=[p.id for p in evidence], evidence_titles=[p.title for p in evidence], **crit
        )
        return step

    def _next_queries(self, crit: dict, pool: EvidencePool) -> list[str]:
        """The critic's suggested queries not asked yet; when it only repeats searches already made
        (the uncompiled 1.5B critic did on 95 of 100 questions), the missing facts it named."""

        def fresh(candidates: list[str]) -> list[str]:
            return [c for c in dict.fromkeys(candidates) if not pool.asked(c)]

        queries = fresh(crit["suggested_queries"]) or fresh(crit["missing_information"])
        return queries[: self.config.queries_per_retry]

    # ---- control flow ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            pool = EvidencePool()
            sub_queries = self._plan(q, tr)
            self._retrieve(sub_queries, cfg.k_for_round(0), pool, tr, 0)
            retries, stop = 0, None
            while stop is None:
                if (spent := tr.exhausted()) is not None:
                    stop = f"budget_{spent}"
                    break
                crit = self._critique(q, pool, tr, retries)
                if crit["critic_stop"]:
                    stop = "sufficient"
                elif retries >= cfg.max_retries:
                    stop = "max_retries"
                elif not (queries := self._next_queries(crit, pool)):
                    stop = "no_new_queries"
                else:
                    retries += 1
                    if not self._retrieve(queries, cfg.k_for_round(retries), pool, tr, retries):
                        stop = "no_new_passages"
                crit["action"] = "stop" if stop else "retry"
            evidence = pool.select(cfg.evidence_cap)
            answer, cited = answer_from_evidence(
                self.generator, q, evidence, cfg.passage_chars, tr, adapter=cfg.generator_adapter
            )
        return dspy.Prediction(
            answer=answer,
            passages=evidence,
            cited_ids=cited,
            trace=tr.steps,
            cost=tr.ledger.summary(),
            calls=[r.to_dict() for r in tr.ledger.records],
            sub_queries=sub_queries,
            queries=list(pool.by_query),
            retries=retries,
            stop_reason=stop,
            system=self.SYSTEM,
        )


VERDICTS = ("sufficient", "insufficient", "contradictory")


def critic_lm_config(cfg: SharpConfig) -> dict:
    """The LM settings of every critic call: its token cap, and logprobs when P(sufficient) is read
    from the verdict's tokens. Critic compilation calls the critic with the same settings (and the
    same adapter, ``cfg.structured_adapter``), so it scores the prompts the program sends."""
    lm_config: dict = {"max_tokens": cfg.critic_max_tokens}
    if cfg.critic_confidence == "token":
        lm_config.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    return lm_config


def critique_problem(fields: dict, parsed: bool = True) -> str | None:
    """Why SHARP discards a critique (None: it is used): nothing readable, a verdict outside
    :data:`VERDICTS` or no 0-1 confidence, or "sufficient" while naming missing facts and queries."""
    verdict = fields.get("verdict")
    if not parsed and not fields:
        return "unparseable"
    if verdict not in VERDICTS or as_score(fields.get("confidence")) is None:
        return f"invalid fields (verdict={verdict!r}, confidence={fields.get('confidence')!r})"
    if verdict == "sufficient" and items(fields.get("suggested_queries")) and items(fields.get("missing_information")):
        return "inconsistent: sufficient but lists missing information"
    return None


def read_critique(fields: dict, parsed: bool = True, logprobs: Any = None, confidence_mode: str = "token") -> dict:
    """A critic's output fields as SHARP acts on them: the verdict, its confidence, P(sufficient) and
    where that came from ("token": the verdict's token probabilities, with ``confidence_mode`` token
    and logprobs present; "verbal": the written verdict and confidence; "fallback": a discarded
    critique, read as "insufficient" with P(sufficient) unknown). The one reading shared by the
    program and critic compilation."""
    problem = critique_problem(fields, parsed)
    probs = None
    if problem:  # discarded: the loop retries (verdict "insufficient"); P(sufficient) is unknown
        verdict, confidence, source, p_sufficient = "insufficient", 0.0, "fallback", UNKNOWN_P_SUFFICIENT
    else:
        verdict, confidence = fields["verdict"], as_score(fields["confidence"])
        if confidence_mode == "token" and (probs := choice_probabilities(logprobs, "verdict", VERDICTS)) is not None:
            confidence, source, p_sufficient = probs[verdict], "token", round(probs["sufficient"], 4)
        else:
            source, p_sufficient = "verbal", round(verbal_p_sufficient(verdict, confidence), 4)
    return {
        "verdict": verdict,
        "confidence": round(confidence, 4),
        "p_sufficient": p_sufficient,
        "confidence_source": source,
        "verdict_probabilities": probs and {k: round(v, 4) for k, v in probs.items()},
        "missing_information": items(fields.get("missing_information"))[:5],
        "suggested_queries": items(fields.get("suggested_queries"))[:5],
        "critic_problem": problem,
    }


def critic_stops(crit: dict, threshold: float) -> bool:
    """Whether a critique ends the loop: P(sufficient) at or above the threshold when it was read
    from token probabilities; otherwise a "sufficient" verdict whose written confidence is."""
    if crit.get("confidence_source") == "token":
        return crit["p_sufficient"] >= threshold
    return crit["verdict"] == "sufficient" and crit["confidence"] >= threshold


def _fields(pred: dspy.Prediction | None, step: dict) -> dict:
    """A step's output fields: the parsed prediction, else what can be salvaged from its raw reply
    (then the step is marked ``salvaged``)."""
    if pred is not None:
        return pred.toDict()
    fields = _salvage_json(step.get("raw_output"))
    if fields:
        step["salvaged"] = True
    return fields


def _salvage_json(raw: str | None) -> dict:
    """The fields of a cut or malformed JSON reply (a weak model looping in a list), or {}."""
    if not raw:
        return {}
    import json_repair

    try:
        value = json_repair.loads(raw[raw.find("{") :] if "{" in raw else raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
