"""ReAct (Yao et al., 2023): dspy.ReAct with the retriever as its only tool, under a step limit.

The tool reaches the question's retriever, tracer and evidence pool through a context variable
set by ``forward`` (so the module holds no per-question state and copies cleanly). When the agent
fails or gives no answer, the generator answers from what the agent found.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import dspy
from pydantic import Field

from program.answers import clean_answer
from program.config import StrictConfig
from program.evidence import EvidencePool, format_evidence
from program.generation import answer_from_evidence
from program.retrieval.base import Retriever
from program.signatures import SEARCH_TOOL_DESC, AgentAnswer, GenerateAnswer
from program.steps import Budget, Tracer, traced
from program.systems.common import finish, retrieve


class ReActConfig(StrictConfig):
    max_iters: int = Field(4, ge=1, le=20, description="Step limit: tool calls the agent may make.")
    k: int = Field(3, ge=1, le=20, description="Passages per search.")
    passage_chars: int = Field(400, ge=50, le=5000)
    evidence_cap: int = Field(8, ge=1, le=40)
    max_question_chars: int = Field(2000, ge=50)
    budget: Budget = Budget(max_lm_calls=16)


@dataclass
class _Session:
    retriever: Retriever
    tracer: Tracer
    pool: EvidencePool
    k: int
    chars: int
    searches: int = 0


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("react_session", default=None)


def search(query: str) -> str:
    """The agent's tool: retrieve k passages for the query (recorded as a retriever step)."""
    s = _SESSION.get()
    if s is None:
        raise RuntimeError("the search tool runs only inside ReActRAG.forward")
    if (spent := s.tracer.exhausted()) is not None:
        return f"Search budget ({spent}) is used up: finish now with the observations you have."
    found = s.retriever.retrieve(query, s.k)
    s.searches += 1
    new = s.pool.add(query, found)
    s.tracer.add("retriever", round=s.searches - 1, k=s.k, queries=[query], retrieved_ids=[[p.id for p in found]],
                 new_ids=[p.id for p in new])
    return format_evidence(found, s.chars)


class ReActRAG(dspy.Module):
    """Predictors: agent (react, extract), generator (the fallback)."""

    SYSTEM = "react"
    ROLE_MAP = {"agent": "generator"}

    def __init__(self, retriever: Retriever, config: ReActConfig | None = None):
        super().__init__()
        self.config = config or ReActConfig()
        self.retriever = retriever
        tool = dspy.Tool(search, name="search", desc=SEARCH_TOOL_DESC)
        self.agent = dspy.ReAct(AgentAnswer, tools=[tool], max_iters=self.config.max_iters)
        self.generator = dspy.Predict(GenerateAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            session = _Session(self.retriever, tr, EvidencePool(), cfg.k, cfg.passage_chars)
            token = _SESSION.set(session)
            try:
                pred, step = tr.call("agent", self.agent, {"question": q[:200], "max_iters": cfg.max_iters},
                                     question=q, max_iters=cfg.max_iters)
            finally:
                _SESSION.reset(token)
            trajectory = dict(getattr(pred, "trajectory", None) or {})
            tools = [v for key, v in trajectory.items() if key.startswith("tool_name_")]
            finished = bool(tools) and tools[-1] == "finish"
            stop = "finish" if finished else "step_limit" if len(tools) >= cfg.max_iters else "agent_stopped"
            step.update(tool_calls=len(tools), searches=session.searches, finished=finished, stop=stop,
                        thoughts=[str(v)[:200] for key, v in trajectory.items() if key.startswith("thought_")])
            evidence = session.pool.select(cfg.evidence_cap)
            answer = clean_answer(getattr(pred, "answer", ""), q) if pred is not None else ""
            cited: list[str] = []
            if not answer:
                if not evidence:
                    evidence = retrieve(self.retriever, q, cfg.k, tr)
                answer, cited = answer_from_evidence(self.generator, q, evidence, cfg.passage_chars, tr)
                stop = "agent_failed"
            step["answer"] = answer
        return finish(self.SYSTEM, tr, answer=answer, passages=evidence, cited=cited, sub_queries=[q],
                      queries=list(session.pool.by_query) or [q], retries=max(0, session.searches - 1),
                      stop_reason=stop)
