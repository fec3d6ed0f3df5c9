"""Evaluate any system over any examples: threads, progress, resumable, with intervals.

Each finished question is appended to a JSONL file at once, so an interrupted run resumes
where it stopped; a run whose settings differ from the file's is refused (start a fresh file).
A full disk or a read-only folder stops the run with a StorageError naming the file, and never
leaves half a row or half a file behind (appends are undone, rewrites are atomic).

A question whose system raised (in particular a failure of the LM service: see program/tracing.py)
is kept as a *failed* row (``error`` set, ``stop_reason`` "error"), counted in ``errors``, and
never taken as done: a resumed run retries it. When several questions in a row fail, the run stops
(the LM is down, most likely) instead of failing the rest one by one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimize.metrics import calibration, question_row
from optimize.stats import bootstrap_ci, mean
from program.errors import SharpError, StorageError
from program.serving.batch import MAX_FAILED_IN_A_ROW, FailureStreak, failure_text, run_each

log = logging.getLogger(__name__)

HEADLINE = ("em", "f1", "all_gold", "recall")


class ResultsMismatchError(SharpError):
    """A results file was written by a run with other settings."""


# Errors that a step of a results file written before failed questions existed recorded for a failure of
# the LM service, while the question went on to the fallback answer ("unknown"): such a row is a failed
# question too, so a resumed run retries it.
_SERVICE_ERRORS = ("LMUnavailableError:", "LMTimeoutError:", "LMProviderError:", "LMEmptyReplyError:")


def service_failed(steps: Iterable[Any]) -> bool:
    """Whether a step of these recorded a failure of the LM service (a row of an older run)."""
    return any(isinstance(t, dict) and str(t.get("error") or "").startswith(_SERVICE_ERRORS) for t in steps)


def is_failed(row: dict) -> bool:
    """Whether a result row is a failed question rather than an answer (see the module docstring)."""
    return row.get("error") is not None or service_failed(row.get("trace") or [])


@dataclass
class EvalResult:
    rows: list[dict]
    metrics: dict
    by_type: dict[str, dict] = field(default_factory=dict)


def error_row(example: Any, exc: BaseException) -> dict:
    return {
        "id": getattr(example, "id", None),
        "question": example.question,
        "type": getattr(example, "type", None),
        "gold": example.answer,
        "answer": "",
        "em": 0.0,
        "f1": 0.0,
        "recall": None,
        "precision": None,
        "all_gold": None,
        "retries": 0,
        "stop_reason": "error",
        "lm_calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "lm_seconds": 0.0,
        "cached_calls": 0,
        "cost_by_role": {},
        "critic_points": [],
        "passage_ids": [],
        "trace": [],
        "error": failure_text(exc),
    }


def aggregate(rows: Sequence[dict], seed: int = 0, intervals: bool = True) -> dict:
    """Headline means with bootstrap 95% CIs (None without ``intervals``: a tuning trial needs the means
    alone), cost per question, calibration, cache and errors."""
    out: dict[str, Any] = {"n": len(rows)}
    for key in HEADLINE + ("precision",):
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key] = mean(vals)
        if key in HEADLINE:
            ci = bootstrap_ci(vals, seed=seed) if intervals else None
            out[f"{key}_ci"] = list(ci) if ci else None
    for key in ("lm_calls", "prompt_tokens", "completion_tokens", "lm_seconds", "seconds", "retries"):
        out[f"{key}_per_q"] = mean([float(r.get(key) or 0) for r in rows])
    calls = sum(r.get("lm_calls", 0) for r in rows)
    out["cached_calls"] = sum(r.get("cached_calls", 0) for r in rows)
    out["cached_share"] = out["cached_calls"] / calls if calls else 0.0
    out["errors"] = sum(is_failed(r) for r in rows)
    out.update(
        {f"critic_{k}": v for k, v in calibration([p for r in rows for p in r.get("critic_points", [])]).items()}
    )
    roles: dict[str, dict] = {}
    for r in rows:
        for role, c in (r.get("cost_by_role") or {}).items():
            agg = roles.setdefault(role, {"lm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "lm_seconds": 0.0})
            for k in agg:
                agg[k] += c.get(k, 0)
    out["per_role_per_q"] = (
        {role: {k: v / len(rows) for k, v in c.items()} for role, c in roles.items()} if rows else {}
    )
    return out


def cold_figures(rows: Sequence[dict]) -> dict:
    """Seconds and tokens per question over the *cold* questions, the ones no LM-cache hit shortened:
    a replayed call takes ~0 s and counts no tokens, which would flatter a mean over every question."""
    cold = [r for r in rows if not r.get("cached_calls") and r.get("seconds") is not None]
    if not cold:
        return {
            "cold_n": 0,
            "cold_seconds_per_q": None,
            "cold_seconds_median": None,
            "cold_prompt_tokens_per_q": None,
            "cold_completion_tokens_per_q": None,
        }
    n = len(cold)
    return {
        "cold_n": n,
        "cold_seconds_per_q": sum(r["seconds"] for r in cold) / n,
        "cold_seconds_median": statistics.median(r["seconds"] for r in cold),
        "cold_prompt_tokens_per_q": sum(r.get("prompt_tokens", 0) for r in cold) / n,
        "cold_completion_tokens_per_q": sum(r.get("completion_tokens", 0) for r in cold) / n,
    }


def _lm_steps(row: dict) -> list[dict]:
    """The row's steps that called an LM: its trace's, or for a compact row (no trace; compact_row) one
    step per role from its ``cost_by_role``, so costs can be imputed from committed result files too."""
    if row.get("trace") is None and row.get("cost_by_role"):
        return [
            {
                "role": role,
                "lm_calls": c.get("lm_calls", 0),
                "prompt_tokens": c.get("prompt_tokens", 0),
                "completion_tokens": c.get("completion_tokens", 0),
                "seconds": c.get("lm_seconds", 0.0),
                "cached_calls": c.get("cached_calls", 0),
            }
            for role, c in row["cost_by_role"].items()
            if c.get("lm_calls")
        ]
    return [t for t in row.get("trace") or [] if isinstance(t, dict) and t.get("lm_calls")]


# Steps of different systems that make the same call (same signature, same inputs), so the cache answers
# one with the other's result: a kind of step a system never ran uncached is costed from its twin.
# CRAG's retrieval evaluator and the LM reranker both run ScoreRelevance on (question, passage).
SAME_CALL = {"retrieval_evaluator": "lm_reranker", "lm_reranker": "retrieval_evaluator"}


def step_sums(rows: Sequence[dict]) -> dict[str, list[float]]:
    """Per kind of step (the trace's ``role``: planner, critic, relevance_grader, ...), over the steps
    with no cached call: LM calls, prompt tokens, completion tokens, seconds."""
    sums: dict[str, list[float]] = {}
    for r in rows:
        for t in _lm_steps(r):
            if t.get("cached_calls"):
                continue
            acc = sums.setdefault(str(t.get("role")), [0.0, 0.0, 0.0, 0.0])
            acc[0] += t["lm_calls"]
            acc[1] += t.get("prompt_tokens") or 0
            acc[2] += t.get("completion_tokens") or 0
            acc[3] += t.get("seconds") or 0.0
    return sums


def _step_sums_pooled(rows: Sequence[dict], pooled: Mapping[str, Sequence[float]] | None) -> dict:
    """:func:`step_sums` of ``rows``, a kind of step they never ran uncached taken from ``pooled`` (or
    its :data:`SAME_CALL` twin there)."""
    sums = step_sums(rows)
    pooled = dict(pooled or {})
    for kind, twin in SAME_CALL.items():
        if pooled.get(kind, [0.0])[0] <= 0 and pooled.get(twin, [0.0])[0] > 0:
            pooled[kind] = pooled[twin]
    for kind, acc in pooled.items():
        if sums.get(kind, [0.0])[0] <= 0 and acc[0] > 0:
            sums[kind] = list(acc)
    return sums


def _row_cost(r: dict, sums: Mapping[str, Sequence[float]]) -> tuple[list[float], int] | None:
    """A timed row's [prompt tokens, completion tokens, seconds], each cached call costed at its kind of
    step's mean in ``sums``, and how many calls were cached; None where that cannot be known (the trace
    does not say which steps were cached, or a kind has no uncached mean)."""
    q = [float(r.get("prompt_tokens") or 0), float(r.get("completion_tokens") or 0), float(r["seconds"])]
    cached = 0
    if r.get("cached_calls"):
        steps = [t for t in _lm_steps(r) if t.get("cached_calls")]
        if sum(t["cached_calls"] for t in steps) != r["cached_calls"]:
            return None  # a row whose trace does not say which steps were cached
        for t in steps:
            n, acc = t["cached_calls"], sums.get(str(t.get("role")))
            if not acc or acc[0] <= 0:
                return None
            q = [q[0] + n * acc[1] / acc[0], q[1] + n * acc[2] / acc[0], q[2] + n * acc[3] / acc[0]]
            cached += n
    return q, cached


def imputed_cost(rows: Sequence[dict], pooled: Mapping[str, Sequence[float]] | None = None) -> dict:
    """Seconds and tokens per question over *every* question, a call answered from DSPy's cache costed at
    the mean of this system's uncached calls of the same kind of step.

    Systems share calls through the cache (Adaptive-RAG's multi-step route repeats SHARP's planner,
    critic and generator calls; Self-RAG's planner call is SHARP's), so in an arena many questions
    have a hit somewhere. The cold-question mean then leaves most questions out, and not at random
    (Self-RAG's cold questions were the ones that never planned: 8 calls against 14). A kind of step
    this system never ran uncached is costed from ``pooled`` (:func:`step_sums` over every system of
    an arena: a call shared through the cache was made, uncached, by one of them or an earlier
    run), or from its :data:`SAME_CALL` twin there; None where none has one. ``imputed_share`` is the
    share of calls costed this way."""
    sums = _step_sums_pooled(rows, pooled)
    unknown = {
        "imputed_seconds_per_q": None,
        "imputed_prompt_tokens_per_q": None,
        "imputed_completion_tokens_per_q": None,
        "imputed_share": None,
    }
    timed = [r for r in rows if r.get("seconds") is not None]
    if not timed:
        return unknown
    total = [0.0, 0.0, 0.0]
    calls = cached = 0
    for r in timed:
        calls += r.get("lm_calls") or 0
        costed = _row_cost(r, sums)
        if costed is None:
            return unknown
        q, n_cached = costed
        cached += n_cached
        total = [a + b for a, b in zip(total, q)]
    n = len(timed)
    return {
        "imputed_seconds_per_q": total[2] / n,
        "imputed_prompt_tokens_per_q": total[0] / n,
        "imputed_completion_tokens_per_q": total[1] / n,
        "imputed_share": cached / calls if calls else 0.0,
    }


def by_type(rows: Sequence[dict], seed: int = 0) -> dict[str, dict]:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get("type") or "unknown"), []).append(r)
    return {
        t: {k: v for k, v in aggregate(g, seed).items() if not isinstance(v, dict)} for t, g in sorted(groups.items())
    }


def read_results(path: Path) -> list[dict]:
    """The rows of a results file (a line cut by a kill is dropped with a warning: that question re-runs)."""
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill: drop it, it is re-run
                log.warning("%s:%d is incomplete; that question will be re-run", path, n)
    return rows


# What a committed results file keeps per question: enough to rebuild every reported figure (answers,
# EM/F1, retrieval, cost, stop reasons, the critic's calls) and to resume a run, without traces or passages.
COMPACT_FIELDS = (
    "id",
    "type",
    "answer",
    "em",
    "f1",
    "recall",
    "precision",
    "all_gold",
    "n_passages",
    "retries",
    "stop_reason",
    "lm_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_calls",
    "lm_seconds",
    "seconds",
    "cost_by_role",
    "critic_points",
    "error",
)
_POINT_FIELDS = ("p", "p_sufficient", "p_token", "label", "stop_call", "action", "source", "verdict", "problem")


def compact_row(row: Mapping[str, Any]) -> dict:
    """A result row cut to :data:`COMPACT_FIELDS` (critic points to their numbers and labels)."""
    out = {k: row.get(k) for k in COMPACT_FIELDS if k in row}
    if out.get("critic_points"):
        out["critic_points"] = [{k: p.get(k) for k in _POINT_FIELDS if k in p} for p in out["critic_points"]]
    return out


def read_rows(path: Path | None, compact_path: Path | None = None) -> dict[str, dict]:
    """id -> row from a results file, completed by the rows of its compact copy that it lacks (a new
    machine has the committed compact file only)."""
    rows: dict[str, dict] = {}
    if compact_path is not None and compact_path.exists():
        rows.update({r["id"]: r for r in read_results(compact_path) if isinstance(r, dict) and "id" in r})
    if path is not None and path.exists():
        rows.update({r["id"]: r for r in read_results(path) if isinstance(r, dict) and "id" in r})
    return rows


# Settings that say what a run asks, not how any question is answered: rows are kept per question id (and a
# report reads only its own questions' rows), so a larger seeded sample resumes a smaller one's rows; a
# program is told by its config and state hash, not by the folder its file lies in, so a checkout elsewhere
# resumes the committed results.
RUN_ONLY_SETTINGS = ("question_ids_hash", "program_file")


def _check_meta(path: Path, meta: dict | None) -> None:
    """Refuse a results file written with other settings; record this run's (the run-only ones updated)."""
    meta_path = path.with_suffix(".meta.json")
    if meta is None:
        return
    new = json.loads(json.dumps(meta))
    if meta_path.exists():
        old = json.loads(meta_path.read_text())

        def deciding(m: dict) -> dict:
            return {k: v for k, v in m.items() if k not in RUN_ONLY_SETTINGS}

        if deciding(old) != deciding(new):
            raise ResultsMismatchError(
                f"{path} holds results of a run with other settings ({meta_path}); "
                f"use another output path or delete both files to start fresh"
            )
        if old == new:
            return
    write_atomic(meta_path, json.dumps(meta, indent=2, sort_keys=True))


# ---- writing results: a full disk or a read-only folder is a StorageError, never half a file ----------
def _storage_error(path: Path, exc: OSError) -> StorageError:
    return StorageError(
        f"cannot write {path}: {exc.strerror or exc}. Free some space or make {path.parent} writable "
        "(or pass --workspace DIR); the questions already in the file are kept, and the same command resumes"
    )


def _check_writable(folder: Path) -> None:
    """Fail before any question runs when the results folder cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _storage_error(folder, exc) from None


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole, or leave it as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise _storage_error(path, exc) from None


def _append(path: Path, line: str) -> None:
    """Append one row; a write cut short (disk full) is undone, so the file never ends in half a row."""
    data = memoryview(line.encode("utf-8"))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _storage_error(path, exc) from None
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise _storage_error(path, exc) from None
    finally:
        os.close(fd)


def _resume(path: Path | None, compact: Path | None, meta: dict | None, examples: list) -> dict[str, dict]:
    """The rows already answered (not failed) by id, from the results and compact files (each checked
    writable and of the same ``meta``, then rewritten whole from the rows they hold)."""
    done: dict[str, dict] = {}
    for f in (path, compact):
        if f:
            _check_writable(f.parent)
            _check_meta(f, meta)
    if path or compact:
        latest = read_rows(path, compact)  # a retried question's last row wins
        for f, rows in ((path, latest), (compact, {i: compact_row(r) for i, r in latest.items()})):
            if f and (f.exists() or rows):  # rewritten whole: a line cut by a kill goes, the two files agree
                write_atomic(f, "".join(json.dumps(r, default=str) + "\n" for r in rows.values()))
        done = {i: r for i, r in latest.items() if not is_failed(r)}
        if latest:
            ids = {getattr(e, "id", None) for e in examples}
            log.info(
                "resuming %s: %d of %d questions already done (%d rows in the file); %d failed before and are retried",
                path or compact,
                len(ids & done.keys()),
                len(examples),
                len(latest),
                len(ids & (latest.keys() - done.keys())),
            )
    return done


def evaluate(
    system: Callable[..., Any],
    examples: Iterable[Any],
    results_path: str | Path | None = None,
    threads: int = 1,
    progress: bool = True,
    meta: dict | None = None,
    seed: int = 0,
    row_fn: Callable[[Any, Any], dict] = question_row,
    compact_path: str | Path | None = None,
    max_failed_in_a_row: int | None = MAX_FAILED_IN_A_ROW,
) -> EvalResult:
    """Run ``system(question=...)`` on each example; keep each row as it finishes; aggregate.

    ``compact_path``: also keep each row's :func:`compact_row` there (a file to commit), and count the
    questions it holds as done when the full results file lacks them. Questions that failed in an earlier
    run are asked again; ``max_failed_in_a_row`` failures one after another stop the run with
    :class:`~program.errors.RunAbortedError` (None: never stop)."""
    examples = list(examples)
    path = Path(results_path) if results_path else None
    compact = Path(compact_path) if compact_path else None
    done = _resume(path, compact, meta, examples)
    todo = [ex for ex in examples if getattr(ex, "id", None) not in done]
    lock = threading.Lock()

    def one(ex: Any) -> dict:
        t0 = time.perf_counter()
        try:
            row = row_fn(ex, system(question=ex.question))
        except Exception as exc:
            log.warning("question %s failed: %s", getattr(ex, "id", "?"), exc)
            row = error_row(ex, exc)
        row["seconds"] = round(time.perf_counter() - t0, 3)
        with lock:
            if path:
                _append(path, json.dumps(row, default=str) + "\n")
            if compact:
                _append(compact, json.dumps(compact_row(row), default=str) + "\n")
        return row

    streak = FailureStreak(max_failed_in_a_row, f"the rows so far (in {path})" if path else "the rows so far")
    new_rows = _run(one, todo, threads, progress, streak)
    by_id = {**done, **{r["id"]: r for r in new_rows}}
    rows = [by_id[ex.id] for ex in examples if getattr(ex, "id", None) in by_id]
    return EvalResult(rows=rows, metrics=aggregate(rows, seed), by_type=by_type(rows, seed))


def _run(
    fn: Callable[[Any], dict], items: list, threads: int, progress: bool, streak: FailureStreak | None = None
) -> list[dict]:
    if not items:
        return []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    cols = [
        TextColumn("[bold]eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("EM {task.fields[em]:.3f}"),
    ]
    rows: list[dict] = []
    with Progress(*cols, disable=not progress, transient=False) as bar:
        task = bar.add_task("eval", total=len(items), em=0.0)
        for row in run_each(fn, items, threads):
            rows.append(row)
            bar.update(task, advance=1, em=sum(r["em"] for r in rows) / len(rows))
            if streak is not None:
                streak.see(is_failed(row), row.get("error"))
    return rows
