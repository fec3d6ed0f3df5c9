"""Record a question's whole trajectory once; score any stopping policy from the record.

SHARP's confidence threshold, retry cap and budgets only decide *when to stop*: they never change what
is retrieved or what the critic says at a given round. So :func:`record` runs the program's own loop
(:meth:`program.sharp.SharpRAG.run`) in explore mode -- never stopping on the critic, up to a maximum
number of retries, answering at every round -- and :func:`replay` walks the recorded rounds with the
loop's own decision (:func:`program.sharp.stop_reason`) to the round a live run with a given
:class:`Policy` stops at: its answer, evidence, trace, stop reason and LM cost (the calls made up to
that round, the bridge step's included), without calling the model. Parameters that change retrieval
(k schedule, evidence cap, retrieval mode) need a new recording; with the LM cache on, calls that
repeat (the planner, identical critiques) are answered from the cache.

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

from optimize.evaluate import (
    MAX_FAILED_IN_A_ROW,
    EvalResult,
    FailureStreak,
    aggregate,
    by_type,
    error_row,
    service_failed,
)
from optimize.metrics import question_row
from optimize.parallel import run_each
from program.critique import critic_stops
from program.errors import ConfigError, SharpError
from program.lm.accounting import recording, summarize
from program.sharp import SharpRAG, stop_reason
from program.steps import Budget, Tracer, check_question
from program.types import Passage

log = logging.getLogger(__name__)

FORMAT = 2  # 2: the bridge step's calls (query_steps, query_calls) per round


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
def record_question(program: SharpRAG, question: str, max_retries: int, answer_rounds: bool = True) -> dict:
    """Run ``program``'s own loop (:meth:`SharpRAG.run`) in explore mode for up to ``max_retries``
    retries, answering at every round (unless ``answer_rounds`` is False: such a record cannot be
    replayed, only harvested for critiques)."""
    cfg = program.config
    q, truncated = check_question(question, cfg.max_question_chars)
    with recording() as ledger:
        tr = Tracer(Budget(max_lm_calls=None), ledger)
        if truncated:
            tr.add("input", note=f"question truncated to {cfg.max_question_chars} characters")
        run = program.run(q, tr, explore=max_retries, answer_rounds=answer_rounds)
    return {
        "format": FORMAT,
        "question": q,
        "sub_queries": run.sub_queries,
        "max_retries": max_retries,
        "head": run.head,
        "rounds": run.rounds,
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


def _failed(rec: dict) -> bool:
    """A record of a question that failed: an error, or (a recording of an older run) a step that
    recorded a failure of the LM service while the question went on to a fallback answer."""
    if rec.get("error"):
        return True
    rounds = rec.get("rounds") or []
    steps = [*(rec.get("head") or {}).get("steps", []), *(r.get(k) for r in rounds for k in ("critic", "generator"))]
    return service_failed(steps)


def _usable(rec: dict, max_retries: int) -> bool:
    return rec.get("max_retries", -1) >= max_retries and not _failed(rec)


def _torn(path: Path) -> bool:
    """Whether ``path`` ends in a line without its newline (a write cut by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def pending(examples: Sequence[Any], max_retries: int, path: str | Path | None) -> list[Any]:
    """The examples a recording at ``path`` still lacks (or holds with fewer retries, or as failed)."""
    done = _read(Path(path)) if path else {}
    return [ex for ex in examples if not (ex.id in done and _usable(done[ex.id], max_retries))]


def record(
    program: SharpRAG,
    examples: Sequence[Any],
    max_retries: int,
    path: str | Path | None = None,
    threads: int = 1,
    max_failed_in_a_row: int | None = MAX_FAILED_IN_A_ROW,
) -> dict[str, dict]:
    """Record every example (resuming from ``path``); return id -> record.

    A question that raised (a failure of the LM service among others: program/steps.py) is kept as
    a record with ``error`` set, scored as a failed row, and recorded again by a resumed run;
    ``max_failed_in_a_row`` failures one after another stop the recording (RunAbortedError)."""
    if not isinstance(program, SharpRAG):
        raise ConfigError(f"replay records SHARP trajectories; {type(program).__name__} has no retry loop")
    if max_retries < 0:
        raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
    path = Path(path) if path else None
    done = _read(path) if path else {}
    done = {k: v for k, v in done.items() if _usable(v, max_retries)}
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

    streak = FailureStreak(max_failed_in_a_row, f"the records so far (in {path})" if path else "the records so far")
    for rec in run_each(one, todo, threads):
        done[rec["id"]] = rec
        streak.see(bool(rec.get("error")), rec.get("error"))
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
    """The prediction a live run with ``policy`` would have returned, built from ``rec``: the rounds are
    walked with the loop's own decision (:func:`program.sharp.stop_reason`)."""
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
    stop, rnd, last = None, None, None
    for rnd in rec["rounds"]:
        i = rnd["round"]
        steps.append(dict(rnd["retriever"]))
        queries += rnd["retriever"]["queries"]
        seconds += rnd["seconds_retrieval"]
        if rnd["critic"] is None and i > 0:  # the retry found nothing new
            stop = "no_new_passages"
            break
        if (spent := _exhausted(policy.budget, calls, seconds)) is not None:
            stop = f"budget_{spent}"
            break
        last = crit = dict(rnd["critic"])
        steps.append(crit)
        calls += rnd["critic_calls"]
        seconds += float(crit.get("seconds") or 0)
        crit["critic_stop"] = critic_stops(crit, policy.confidence_threshold)  # as the live run records it
        stop = stop_reason(crit, i, policy)
        if stop is None:
            if "query_steps" not in rnd:
                raise ReplayError("the record ends before the policy stops; it is incomplete")
            steps += [dict(s) for s in rnd["query_steps"]]
            calls += rnd["query_calls"]
            seconds += sum(float(s.get("seconds") or 0) for s in rnd["query_steps"])
            if not rnd["next_queries"]:
                stop = "no_new_queries"
        crit["action"] = "stop" if stop else "retry"
        if stop:
            break
    if stop is None or rnd is None:
        raise ReplayError("the record ends before the policy stops; it is incomplete")
    if last is not None:
        last["action"] = "stop"
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
