"""ReAct (Yao et al., 2023): dspy.ReAct with the retriever as its only tool, under a step limit.

The tool reaches the question's retriever, tracer and evidence pool through a context variable
set by ``forward`` (so the module holds no per-question state and copies cleanly). When the agent
fails or gives no answer, the generator answers from what the agent found.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

import dspy
from pydantic import Field

from program.config import StrictConfig
from program.reading.answers import clean_answer
from program.reading.evidence import EvidencePool, format_evidence
from program.reading.generation import answer_from_evidence
from program.retrieval.base import Retriever
from program.signatures import (
    SEARCH_BUDGET_SPENT,
    SEARCH_EXHAUSTED,
    SEARCH_REPEATED,
    SEARCH_TOOL_DESC,
    AgentAnswer,
    GenerateAnswer,
)
from program.systems.common import answered, retrieve
from program.tracing import Budget, Tracer, traced


class ReActConfig(StrictConfig):
    max_iters: int = Field(4, ge=1, le=20, description="Step limit: tool calls the agent may make.")
    k: int = Field(3, ge=1, le=20, description="Passages per search.")
    passage_chars: int = Field(400, ge=50, le=5000)
    evidence_cap: int = Field(8, ge=1, le=40)
    max_answer_words: int = Field(
        10,
        ge=1,
        le=200,
        description=(
            "An agent answer longer than this is a sentence, not a span (the 1.5B agent's extract step writes "
            "'The original mosque built by Muhammad ...'): the generator answers from the agent's evidence instead."
        ),
    )
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
    repeated: int = 0
    repaired_args: int = 0
    pages: dict[str, int] = field(default_factory=dict)  # normalized query -> times searched
    shown: dict[str, set[str]] = field(default_factory=dict)  # normalized query -> passage ids shown for it


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("react_session", default=None)


def search(query: str) -> str:
    """The agent's tool: retrieve k passages for the query (recorded as a retriever step). A repeated
    query (the 1.5B agent repeats one search until the step limit) gets the next k results instead of
    the same page, with a nudge to move on; when none are left it says so without a retrieval."""
    s = _SESSION.get()
    if s is None:
        raise RuntimeError("the search tool runs only inside ReActRAG.forward")
    if (spent := s.tracer.exhausted()) is not None:
        return SEARCH_BUDGET_SPENT.format(spent=spent)
    key = " ".join(query.lower().split())
    page = s.pages.get(key, 0)
    s.pages[key] = page + 1
    k = s.k * (page + 1)
    found = s.retriever.retrieve(query, k)
    shown = s.shown.setdefault(key, set())
    fresh = [p for p in found if p.id not in shown]
    shown.update(p.id for p in fresh)
    s.searches += 1
    s.repeated += bool(page)
    new = s.pool.add(query, fresh)
    s.tracer.add(
        "retriever",
        round=s.searches - 1,
        k=k,
        queries=[query],
        retrieved_ids=[[p.id for p in fresh]],
        new_ids=[p.id for p in new],
        repeated=bool(page),
    )
    if not page:
        return format_evidence(found, s.chars)
    if not fresh:
        return SEARCH_EXHAUSTED.format(query=query)
    return SEARCH_REPEATED.format(query=query, passages=format_evidence(fresh, s.chars))


def repair_args(kwargs: dict[str, Any], schema: dict[str, dict]) -> tuple[dict[str, Any], bool]:
    """Tool arguments as a small model writes them, made callable. The 1.5B agent echoes the schema
    it is shown (``{"query": {"type": "string", "value": "Naruto voice actor"}}``) or renames the
    only argument (``{"q": ...}``); without repair every call is an "Execution error" with a
    traceback, the agent repeats the same call, and the run ends at the step limit with no search
    (measured on 3 of 3 HotpotQA questions before the repair; ReAct's arena with it:
    experiments/findings/baselines.md). Returns the arguments and whether anything was changed."""
    out, changed = dict(kwargs), False
    unknown = [k for k in out if k not in schema]
    missing = [k for k in schema if k not in out]
    if len(unknown) == 1 and len(missing) == 1:
        out[missing[0]] = out.pop(unknown[0])
        changed = True
    for key, value in list(out.items()):
        if (schema.get(key) or {}).get("type") != "string" or isinstance(value, str):
            continue
        if isinstance(value, dict):  # the schema echoed, with the text under "value" (or the key itself)
            inner = value.get("value", value.get(key))
            texts = [v for k, v in value.items() if isinstance(v, str) and k not in ("type", "title", "description")]
            text = inner if isinstance(inner, str) else texts[0] if len(texts) == 1 else None
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            text = " ".join(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            text = str(value)
        else:
            text = None
        if text is not None and text.strip():  # nothing usable: left as is, for the tool's own error
            out[key], changed = text, True
    return out, changed


class SearchTool(dspy.Tool):
    """The ``search`` tool, taking the arguments a small model writes (:func:`repair_args`); every
    repair is counted in the question's trace."""

    def __init__(self) -> None:
        super().__init__(search, name="search", desc=SEARCH_TOOL_DESC)

    def _validate_and_parse_args(self, **kwargs: Any) -> dict[str, Any]:
        fixed, changed = repair_args(kwargs, self.args)
        if changed and (s := _SESSION.get()) is not None:
            s.repaired_args += 1
        return super()._validate_and_parse_args(**fixed)


class ReActRAG(dspy.Module):
    """Predictors: agent (react, extract), generator (the fallback)."""

    SYSTEM = "react"
    ROLE_MAP = {"agent": "generator"}

    def __init__(self, retriever: Retriever, config: ReActConfig | None = None):
        super().__init__()
        self.config = config or ReActConfig()
        self.retriever = retriever
        self.agent = dspy.ReAct(AgentAnswer, tools=[SearchTool()], max_iters=self.config.max_iters)
        self.generator = dspy.Predict(GenerateAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            session = _Session(self.retriever, tr, EvidencePool(), cfg.k, cfg.passage_chars)
            token = _SESSION.set(session)
            try:
                pred, step = tr.call(
                    "agent",
                    self.agent,
                    {"question": q[:200], "max_iters": cfg.max_iters},
                    question=q,
                    max_iters=cfg.max_iters,
                )
            finally:
                _SESSION.reset(token)
            trajectory = dict(getattr(pred, "trajectory", None) or {})
            tools = [v for key, v in trajectory.items() if key.startswith("tool_name_")]
            finished = bool(tools) and tools[-1] == "finish"
            stop = "finish" if finished else "step_limit" if len(tools) >= cfg.max_iters else "agent_stopped"
            errors = sum(
                str(v).startswith("Execution error") for key, v in trajectory.items() if key.startswith("observation_")
            )
            step.update(
                tool_calls=len(tools),
                searches=session.searches,
                repeated_searches=session.repeated,
                tool_errors=errors,
                repaired_args=session.repaired_args,
                finished=finished,
                stop=stop,
                thoughts=[str(v)[:200] for key, v in trajectory.items() if key.startswith("thought_")],
            )
            evidence = session.pool.select(cfg.evidence_cap)
            answer = clean_answer(getattr(pred, "answer", ""), q) if pred is not None else ""
            cited: list[str] = []
            if answer and len(answer.split()) > cfg.max_answer_words:
                step["agent_answer"] = answer[:300]
                answer, stop = "", "agent_not_a_span"
            if not answer:
                if not evidence:
                    evidence = retrieve(self.retriever, q, cfg.k, tr)
                answer, cited = answer_from_evidence(self.generator, q, evidence, cfg.passage_chars, tr)
                stop = "agent_not_a_span" if stop == "agent_not_a_span" else "agent_failed"
            step["answer"] = answer
        return answered(
            self.SYSTEM, tr, q, answer, evidence, cited, stop, session.pool.by_query, max(0, session.searches - 1)
        )
