"""SHARP: plan -> retrieve -> critique -> (bridge query, re-retrieval at a wider k)* -> generate.

The loop is written once, in :meth:`SharpRAG.run`. A live question runs it with the program's policy;
:func:`optimize.replay.record` runs the same method in *explore* mode (never stop on the critic, answer at
every round), and replay applies the same pure :func:`stop_reason` to the recorded critiques, so the policy
that is tuned by replay is the policy that runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import dspy
from pydantic import Field, field_validator, model_validator

from program.calibration import Calibrator, critique_features
from program.confidence import DEFAULT_CONFIDENCE_THRESHOLD
from program.config import StrictConfig
from program.critique import VERDICTS, critic_lm_config, critic_stops, output_fields, read_critique
from program.evidence import EvidencePool, format_evidence
from program.generation import answer_from_evidence
from program.parsing import as_text, items
from program.retrieval.base import Retriever
from program.signatures import BridgeQuery, CritiqueEvidence, GenerateAnswer, PlanSubQueries
from program.steps import Budget, Tracer, finish, traced
from program.text import content_terms
from program.types import Passage

__all__ = ["VERDICTS", "SharpConfig", "SharpRAG", "stop_reason"]


class SharpConfig(StrictConfig):
    """Everything an optimizer may tune, validated."""

    k_schedule: tuple[int, ...] = (3, 5, 7)
    # stop when P(sufficient) (calibrated when a calibrator is fitted) >= this; `sharp tune` searches it
    confidence_threshold: float = Field(DEFAULT_CONFIDENCE_THRESHOLD, ge=0.0, le=1.0)
    max_retries: int = Field(2, ge=0, le=10)
    # the generator and critic read at most this many passages of the pool (plain RAG reads 5)
    evidence_cap: int = Field(5, ge=1, le=40)
    # "round_robin": rank by rank across queries (the hybrid retriever's fused scores are not comparable
    # across queries); "score": the whole pool ranked by each passage's best score (a reranker's
    # probability is comparable: use it with --retriever-set reranker=NAME)
    evidence_order: Literal["score", "round_robin"] = "round_robin"
    # the retriever searches again from each query's top passage (program/retrieval/hop.py; no LM call)
    second_hop: bool = True
    # the evidence grows with the k schedule, up to evidence_cap: few passages read best (a 1.5B reader), more
    # when the critic asks for them (experiments/RESULTS.md, 'Evidence ranker')
    evidence_widens: bool = False
    passage_chars: int = Field(600, ge=50, le=5000)  # as plain RAG: 450 cut the answer from 4% of gold paragraphs
    planner: bool = True  # False: the question is the only first-round search (no planner call)
    max_sub_queries: int = Field(3, ge=1, le=8)
    queries_per_retry: int = Field(2, ge=1, le=6)
    include_question: bool = True
    # the bridge step names the entity to search next, from the evidence: "always" on every retry (first,
    # then the critic's fresh queries), "stale" only when the critic's queries repeat earlier searches or
    # add no new term, "off" never. "always": on held-out train questions its entities found a missing
    # gold paragraph more often than the critic's queries (RESULTS.md, loop study)
    bridge: Literal["off", "stale", "always"] = "always"
    bridge_max_tokens: int = Field(64, ge=8, le=1024)
    # a retry's searches are "QUESTION QUERY" instead of the query alone: what an evidence ranker wants (it
    # scores a passage against the text searched; --retriever-set ranker=NAME), so the bridge entity's
    # passages are ranked for the question (experiments/RESULTS.md, 'Evidence ranker')
    retry_with_question: bool = False
    critic_reasoning: bool = False
    # "token": P(sufficient) read from the critic's token probabilities where the LM returns them
    # (program/confidence.py), else its written confidence; "verbal": always the written confidence
    critic_confidence: Literal["token", "verbal"] = "token"
    calibrator: Calibrator | None = None  # fitted by `sharp compile --target critic`
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
        if self.evidence_cap < self.k_schedule[0] and self.evidence_order == "round_robin":
            raise ValueError(f"evidence_cap ({self.evidence_cap}) is below the first k ({self.k_schedule[0]})")
        return self

    def k_for_round(self, round_no: int) -> int:
        return self.k_schedule[min(round_no, len(self.k_schedule) - 1)]

    def critic_lm_config(self) -> dict:
        return critic_lm_config(self.critic_max_tokens, self.critic_confidence)


def stop_reason(crit: dict, round_no: int, policy: Any) -> str | None:
    """The loop's decision after a critique, the same live and in replay: "sufficient" when the critique
    ends it at ``policy.confidence_threshold``, "max_retries" when no retry is left, else None (retry)."""
    if critic_stops(crit, policy.confidence_threshold):
        return "sufficient"
    if round_no >= policy.max_retries:
        return "max_retries"
    return None


@dataclass(frozen=True)
class _Explore:
    """The policy of a recording: never stop on the critic, retry up to ``max_retries``."""

    max_retries: int
    confidence_threshold: float = 2.0  # above every probability


@dataclass
class Run:
    """One question's loop: the rounds (each a dict of steps and calls), the pool, and how it ended."""

    question: str
    sub_queries: list[str]
    pool: EvidencePool = field(default_factory=EvidencePool)
    head: dict = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)
    stop: str | None = None


# a bridge "entity" longer than this is a sentence the model copied or wrote, not a name to search
MAX_ENTITY_WORDS = 10


class SharpRAG(dspy.Module):
    """The self-correcting multi-hop program. Predictors: planner, critic, bridge, generator."""

    SYSTEM = "sharp"
    ROLE_MAP = {"bridge": "planner"}  # the bridge query is written with the planner's LM

    def __init__(self, retriever: Retriever, config: SharpConfig | None = None):
        super().__init__()
        self.config = config or SharpConfig()
        self.retriever = retriever
        self.planner = dspy.Predict(PlanSubQueries)
        self.critic = (dspy.ChainOfThought if self.config.critic_reasoning else dspy.Predict)(CritiqueEvidence)
        self.bridge = dspy.Predict(BridgeQuery)
        self.generator = (dspy.ChainOfThought if self.config.generator_reasoning else dspy.Predict)(GenerateAnswer)

    # ---- steps -------------------------------------------------------------------------------
    def _plan(self, q: str, tr: Tracer) -> tuple[list[str], list[str]]:
        """(the planner's sub-queries, the first round's queries)."""
        cfg = self.config
        planned: list[str] = []
        if cfg.planner:
            pred, step = tr.call(
                "planner",
                self.planner,
                {"question": q[:200]},
                adapter=cfg.structured_adapter,
                config={"max_tokens": cfg.planner_max_tokens},
                question=q,
            )
            # a planner looping in its list is cut by max_tokens: the queries before the cut still count
            planned = list(dict.fromkeys(items(output_fields(pred, step).get("sub_queries"))))
            if step.get("salvaged"):  # the last query may be cut mid-word: drop a prefix of another query
                planned = [p for p in planned if not any(o != p and o.startswith(p) for o in planned)]
            planned = planned[: cfg.max_sub_queries]
            step["sub_queries"] = planned
        queries = ([q] if cfg.include_question or not cfg.planner else []) + planned
        if not queries:  # the planner failed and the question is not included: search the question
            queries = [q]
            tr.add("input", note="the planner wrote no query: the question is the only search")
        return planned, list(dict.fromkeys(queries))

    def _retrieve(
        self, q: str, queries: list[str], k: int, pool: EvidencePool, tr: Tracer, round_no: int
    ) -> list[Passage]:
        with_question = round_no > 0 and self.config.retry_with_question
        searched = [f"{q} {query}" if with_question else query for query in queries]
        results = self.retriever.retrieve_many(searched, k)
        new: list[Passage] = []
        for query, passages in zip(queries, results):
            new += pool.add(query, passages)
        tr.add(
            "retriever",
            round=round_no,
            k=k,
            queries=queries,
            **({"searched_with_question": True} if with_question else {}),
            retrieved_ids=[[p.id for p in ps] for ps in results],
            new_ids=[p.id for p in new],
        )
        return new

    def evidence(self, pool: EvidencePool, round_no: int = 0) -> list[Passage]:
        """What the critic, the bridge step and the generator read at ``round_no``: the pool's best
        ``evidence_cap`` passages, or with ``evidence_widens`` the round's k of them (at most the cap)."""
        cfg = self.config
        cap = min(cfg.evidence_cap, cfg.k_for_round(round_no)) if cfg.evidence_widens else cfg.evidence_cap
        return pool.select(cap, cfg.evidence_order)

    def _critique(self, q: str, pool: EvidencePool, tr: Tracer, round_no: int) -> dict:
        cfg = self.config
        evidence = self.evidence(pool, round_no)
        pred, step = tr.call(
            "critic",
            self.critic,
            {"question": q[:200], "n_passages": len(evidence)},
            adapter=cfg.structured_adapter,
            config=cfg.critic_lm_config(),
            question=q,
            sub_queries=list(pool.by_query),
            evidence=format_evidence(evidence, cfg.passage_chars),
        )
        crit = read_critique(
            output_fields(pred, step), pred is not None, getattr(pred, "logprobs", None), cfg.critic_confidence
        )
        features = critique_features(crit, evidence, q, round_no, pool.sources())
        crit["features"] = {k: round(v, 4) for k, v in features.items()}
        crit["p_calibrated"] = round(cfg.calibrator.probability(features), 4) if cfg.calibrator else None
        crit["critic_stop"] = critic_stops(crit, cfg.confidence_threshold)
        step.update(
            round=round_no,
            evidence_ids=[p.id for p in evidence],
            evidence_titles=[p.title for p in evidence],
            **crit,
        )
        return step

    def _bridge(self, q: str, pool: EvidencePool, tr: Tracer, round_no: int) -> str | None:
        """The bridge step's entity to search, or None (garbage, empty, a sentence rather than a name, or a
        search already made: recorded in the step's ``problem``)."""
        cfg = self.config
        evidence = self.evidence(pool, round_no)
        pred, step = tr.call(
            "bridge",
            self.bridge,
            {"question": q[:200], "n_passages": len(evidence)},
            adapter=cfg.structured_adapter,
            config={"max_tokens": cfg.bridge_max_tokens},
            question=q,
            searched=list(pool.by_query),
            evidence=format_evidence(evidence, cfg.passage_chars),
        )
        query = as_text(output_fields(pred, step).get("entity"))
        problem = None
        if not query:
            problem = "no entity"
        elif len(query.split()) > MAX_ENTITY_WORDS:
            problem = f"not a name ({len(query.split())} words)"
        elif pool.asked(query):
            problem = "repeats an earlier search"
        step.update(round=round_no, query=query, problem=problem)
        return None if problem else query

    def _next_queries(self, q: str, crit: dict, pool: EvidencePool, tr: Tracer, round_no: int) -> list[str]:
        """The next round's searches: the critic's suggested queries that are new (not asked, and adding
        a term no earlier search or the question had), with the bridge query first when the bridge step
        runs; when neither yields one, the missing facts the critic named that were not searched."""
        cfg = self.config
        known = content_terms(" ".join([q, *pool.by_query]))
        fresh = [c for c in dict.fromkeys(crit["suggested_queries"]) if not pool.asked(c) and content_terms(c) - known]
        queries = list(fresh)
        if cfg.bridge == "always" or (cfg.bridge == "stale" and not fresh):
            bridged = self._bridge(q, pool, tr, round_no)
            if bridged:
                queries = [bridged, *[c for c in fresh if c != bridged]]
        if not queries:
            queries = [m for m in dict.fromkeys(crit["missing_information"]) if not pool.asked(m)]
        return queries[: cfg.queries_per_retry]

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, q: str, tr: Tracer, explore: int | None = None, answer_rounds: bool = True) -> Run:
        """The loop, once. Live (``explore`` None): stop as the config's policy says. Explore (a recording
        for replay): never stop on the critic, retry up to ``explore`` times, and answer from every
        round's evidence (each round's ``answer``, ``generator`` step and calls; ``answer_rounds`` False
        skips that, for a harvest of critiques that needs no answers)."""
        cfg = self.config
        policy = cfg if explore is None else _Explore(explore)
        sub_queries, queries = self._plan(q, tr)
        run = Run(q, sub_queries, head={"steps": list(tr.steps), "calls": _calls(tr, 0)})
        i = 0
        while True:
            n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
            new = self._retrieve(q, queries, cfg.k_for_round(i), run.pool, tr, i)
            rnd: dict[str, Any] = {
                "round": i,
                "retriever": tr.steps[n_steps],
                "seconds_retrieval": round(time.perf_counter() - t0, 4),
                "critic": None,
                "next_queries": [],
            }
            run.rounds.append(rnd)
            if i > 0 and not new:
                run.stop = "no_new_passages"
            elif explore is None and (spent := tr.exhausted()) is not None:
                run.stop = f"budget_{spent}"
            else:
                n_calls = len(tr.ledger.records)
                rnd["critic"] = crit = self._critique(q, run.pool, tr, i)
                rnd["critic_calls"] = _calls(tr, n_calls)
                run.stop = stop_reason(crit, i, policy)
                crit["action"] = "stop" if run.stop else "retry"  # before the next step starts (observers see it)
            if explore is not None and answer_rounds:
                self._answer_round(q, run, tr, rnd)
            if run.stop is None:
                n_steps, n_calls = len(tr.steps), len(tr.ledger.records)
                queries = self._next_queries(q, rnd["critic"], run.pool, tr, i)
                rnd.update(next_queries=queries, query_steps=tr.steps[n_steps:], query_calls=_calls(tr, n_calls))
                if not queries:
                    run.stop = "no_new_queries"
            if rnd["critic"] is not None:
                rnd["critic"]["action"] = "stop" if run.stop else "retry"
            last = next((r["critic"] for r in reversed(run.rounds) if r["critic"] is not None), None)
            if run.stop and last is not None:
                last["action"] = "stop"
            if run.stop:
                return run
            i += 1

    def _answer_round(self, q: str, run: Run, tr: Tracer, rnd: dict) -> None:
        n_calls = len(tr.ledger.records)
        evidence = self.evidence(run.pool, rnd["round"])
        answer, cited = answer_from_evidence(
            self.generator, q, evidence, self.config.passage_chars, tr, adapter=self.config.generator_adapter
        )
        rnd.update(
            evidence=[{"id": p.id, "title": p.title} for p in evidence],
            answer=answer,
            cited_ids=cited,
            generator=tr.steps[-1],
            generator_calls=_calls(tr, n_calls),
        )

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            run = self.run(q, tr)
            evidence = self.evidence(run.pool, run.rounds[-1]["round"])
            answer, cited = answer_from_evidence(
                self.generator, q, evidence, cfg.passage_chars, tr, adapter=cfg.generator_adapter
            )
        return finish(
            self.SYSTEM,
            tr,
            answer=answer,
            passages=evidence,
            cited=cited,
            sub_queries=run.sub_queries,
            queries=list(run.pool.by_query),
            retries=run.rounds[-1]["round"],
            stop_reason=run.stop,
        )


def _calls(tr: Tracer, mark: int) -> list[dict]:
    return [r.to_dict() for r in tr.ledger.records[mark:]]
