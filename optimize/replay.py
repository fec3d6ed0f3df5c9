"""Record a question's whole trajectory once; score any stopping policy from the record.

SHARP's confidence threshold and retry cap only decide *when to stop*: they never change what
is retrieved or what the critic says at a given round. So :func:`record` drives the program's
own steps round by round up to a maximum number of retries, whatever the critic says, and at
every possible stopping point also generates the answer from that round's evidence. Then
:func:`replay` turns a :class:`Policy` (threshold, max_retries, budget) into the stopping round
of each question, and so into exactly the prediction a live run would have produced: answer,
evidence, trace, stop reason and LM cost (the calls made up to that round) -- without calling
the model. Parameters that change retrieval (k schedule, evidence cap, retrieval mode) need a
new recording; with the LM cache on, calls that repeat (the planner, identical critiques) are
answered from the cache.

A record is a plain JSON dict; recordings are kept as JSONL, one line per question, and an
interrupted recording resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from optimize.evaluate import EvalResult, aggregate, by_type, error_row
from optimize.metrics import question_row
from optimize.parallel import run_each
from program.errors import ConfigError, SharpError
from program.evidence import EvidencePool
from program.generation import answer_from_evidence
from program.lm.accounting import Ledger, recording, summarize
from program.sharp import SharpRAG, critic_stops
from program.steps import Budget, Tracer, check_question
from program.types import Passage

log = logging.getLogger(__name__)

FORMAT = 1


class ReplayError(SharpError):
    """A record cannot answer the policy asked of it (e.g. more retries than were recorded)."""


@dataclass(frozen=True)
class Policy:
    """The stopping rule: everything about SHARP that replay can vary without the model."""

    confidence_threshold: float
    max_retries: int
    budget: Budget = Budget()

    @classmethod
    def of(cls, config: Any) -> Policy:
        return cls(config.confidence_threshold, config.max_retries, config.budget)


# ---- recording ---------------------------------------------------------------------------------
def _since(ledger: Ledger, mark: int) -> list[dict]:
    return [r.to_dict() for r in ledger.records[mark:]]


def _evidence(passages: list[Passage]) -> list[dict]:
    return [{"id": p.id, "title": p.title} for p in passages]


def record_question(program: SharpRAG, question: str, max_retries: int) -> dict:
    """Drive ``program``'s steps for up to ``max_retries`` retries; answer at every round."""
    cfg = program.config
    q, truncated = check_question(question, cfg.max_question_chars)
    with recording() as ledger:
        tr = Tracer(Budget(max_lm_calls=None), ledger)
        if truncated:
            tr.add("input", note=f"question truncated to {cfg.max_question_chars} characters")
        pool = EvidencePool()
        sub_queries = program._plan(q, tr)
        head = {"steps": list(tr.steps), "calls": _since(ledger, 0)}
        rounds: list[dict] = []
        queries, new_passages, i = sub_queries, True, 0
        while True:
            n_steps, t0 = len(tr.steps), time.perf_counter()
            new = program._retrieve(queries, cfg.k_for_round(i), pool, tr, i)
            rnd: dict[str, Any] = {
                "round": i,
                "retriever": tr.steps[n_steps],
                "seconds_retrieval": round(time.perf_counter() - t0, 4),
                "critic": None,
                "next_queries": [],
            }
            new_passages = bool(new) or i == 0
            evidence = pool.select(cfg.evidence_cap)
            rnd["evidence"] = _evidence(evidence)
            if new_passages:
                mark = len(ledger.records)
                rnd["critic"] = program._critique(q, pool, tr, i)
                rnd["critic_calls"] = _since(ledger, mark)
            mark = len(ledger.records)
            answer, cited = answer_from_evidence(program.generator, q, evidence, cfg.passage_chars, tr)
            rnd.update(answer=answer, cited_ids=cited, generator=tr.steps[-1], generator_calls=_since(ledger, mark))
            rounds.append(rnd)
            if not new_passages or i >= max_retries:
                break
            queries = program._next_queries(rnd["critic"], pool)
            rnd["next_queries"] = queries
            if not queries:
                break
            i += 1
    return {
        "format": FORMAT,
        "question": q,
        "sub_queries": sub_queries,
        "max_retries": max_retries,
        "head": head,
        "rounds": rounds,
        "error": None,
    }


def _read(path: Path) -> dict[str, dict]:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill: re-recorded
                continue
            done[rec["id"]] = rec
    return done


def _torn(path: Path) -> bool:
    """Whether ``path`` ends in a line without its newline (a write cut by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def pending(examples: Sequence[Any], max_retries: int, path: str | Path | None) -> list[Any]:
    """The examples a recording at ``path`` still lacks (or holds with fewer retries, or as errors)."""
    done = _read(Path(path)) if path else {}
    return [
        ex
        for ex in examples
        if not (ex.id in done and done[ex.id].get("max_retries", -1) >= max_retries and not done[ex.id].get("error"))
    ]


def record(
    program: SharpRAG, examples: Sequence[Any], max_retries: int, path: str | Path | None = None, threads: int = 1
) -> dict[str, dict]:
    """Record every example (resuming from ``path``); return id -> record."""
    if not isinstance(program, SharpRAG):
        raise ConfigError(f"replay records SHARP trajectories; {type(program).__name__} has no retry loop")
    if max_retries < 0:
        raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
    path = Path(path) if path else None
    done = _read(path) if path else {}
    done = {k: v for k, v in done.items() if v.get("max_retries", -1) >= max_retries and not v.get("error")}
    todo = [ex for ex in examples if ex.id not in done]
    lock = threading.Lock()
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if _torn(path):  # rewrite without a line cut by a kill, so appends start on a fresh line
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in _read(path).values()))
            tmp.replace(path)  # atomic: another worker reading or appending never sees half a file

    def one(ex: Any) -> dict:
        t0 = time.perf_counter()
        try:
            rec = record_question(program, ex.question, max_retries)
        except Exception as exc:
            log.warning("recording question %s failed: %s", ex.id, exc)
            rec = {"format": FORMAT, "max_retries": max_retries, "error": f"{type(exc).__name__}: {exc}"[:1000]}
        rec["id"] = ex.id
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        if path:
            with lock, path.open("a") as fh:
                fh.write(json.dumps(rec, default=str) + "\n")
        return rec

    for rec in run_each(one, todo, threads):
        done[rec["id"]] = rec
    return done


# ---- replay ------------------------------------------------------------------------------------
def _exhausted(budget: Budget, calls: list[dict], seconds: float) -> str | None:
    s = summarize(calls)
    if budget.max_lm_calls is not None and s["lm_calls"] >= budget.max_lm_calls:
        return "lm_calls"
    if budget.max_tokens is not None and s["prompt_tokens"] + s["completion_tokens"] >= budget.max_tokens:
        return "tokens"
    if budget.max_seconds is not None and seconds >= budget.max_seconds:
        return "seconds"
    return None


def replay(rec: dict, policy: Policy) -> dspy.Prediction:
    """The prediction a live run with ``policy`` would have returned, built from ``rec``."""
    if rec.get("error"):
        raise ReplayError(rec["error"])
    if policy.max_retries > rec["max_retries"]:
        raise ReplayError(
            f"policy max_retries={policy.max_retries} exceeds the {rec['max_retries']} recorded; "
            f"record with more retries"
        )
    steps = [dict(s) for s in rec["head"]["steps"]]
    calls = list(rec["head"]["calls"])
    seconds = sum(float(s.get("seconds") or 0) for s in steps)
    queries: list[str] = []
    stop, rnd = None, None
    for rnd in rec["rounds"]:
        i = rnd["round"]
        steps.append(dict(rnd["retriever"]))
        queries += rnd["retriever"]["queries"]
        seconds += rnd["seconds_retrieval"]
        if rnd["critic"] is None:  # the retry found nothing new: the previous critique was the last
            stop = "no_new_passages"
            last = next((s for s in reversed(steps) if s.get("role") == "critic"), None)
            if last is not None:
                last["action"] = "stop"
            break
        if (spent := _exhausted(policy.budget, calls, seconds)) is not None:
            stop = f"budget_{spent}"
            break
        crit = dict(rnd["critic"])
        steps.append(crit)
        calls += rnd["critic_calls"]
        seconds += float(crit.get("seconds") or 0)
        crit["critic_stop"] = critic_stops(crit, policy.confidence_threshold)  # as the live run records it
        if crit["critic_stop"]:
            stop = "sufficient"
        elif i >= policy.max_retries:
            stop = "max_retries"
        elif not rnd["next_queries"]:
            stop = "no_new_queries"
        crit["action"] = "stop" if stop else "retry"
        if stop:
            break
    if stop is None or rnd is None:
        raise ReplayError("the record ends before the policy stops; it is incomplete")
    steps.append(dict(rnd["generator"]))
    calls += rnd["generator_calls"]
    seconds += float(rnd["generator"].get("seconds") or 0)
    for n, step in enumerate(steps):
        step["step"] = n
    passages = [Passage(p["id"], p["title"], "") for p in rnd["evidence"]]
    return dspy.Prediction(
        answer=rnd["answer"],
        passages=passages,
        cited_ids=rnd["cited_ids"],
        trace=steps,
        cost=summarize(calls),
        calls=calls,
        sub_queries=rec["sub_queries"],
        queries=list(dict.fromkeys(queries)),
        retries=rnd["round"],
        stop_reason=stop,
        system=SharpRAG.SYSTEM,
        recorded_seconds=round(seconds, 4),
    )


def live_seconds(prediction: Any) -> float:
    """What the steps a replayed prediction used took when they ran: its estimated live cost."""
    return float(getattr(prediction, "recorded_seconds", 0.0) or 0.0)


def score(records: dict[str, dict], examples: Iterable[Any], policy: Policy, seed: int = 0) -> EvalResult:
    """Rows and aggregate metrics of ``policy`` over ``examples``, as :func:`optimize.evaluate.evaluate`
    would report them for a live run (plus ``live_seconds``: the recorded seconds of the steps used)."""
    rows = []
    for ex in examples:
        rec = records.get(ex.id)
        if rec is None:
            raise ReplayError(f"question {ex.id} was not recorded")
        if rec.get("error"):
            row = error_row(ex, RuntimeError(rec["error"]))
            row["live_seconds"] = 0.0
        else:
            pred = replay(rec, policy)
            row = question_row(ex, pred)
            row["live_seconds"] = round(live_seconds(pred), 4)
        rows.append(row)
    metrics = aggregate(rows, seed)
    metrics["live_seconds_per_q"] = sum(r["live_seconds"] for r in rows) / len(rows) if rows else 0.0
    return EvalResult(rows=rows, metrics=metrics, by_type=by_type(rows, seed))
