"""Record a question's every round once; score any SHARP policy from the record.

A policy (the accept threshold, when the critic is asked, which repairs a form gets and how many, how the
answer is selected, the gate and judge calibrators, the budget) only decides *which recorded rounds a live
run would reach and which answer it would return*: it never changes what a round retrieves or reads. So
:func:`record` runs the program's own loop (:meth:`program.sharp.SharpRAG.run`) in explore mode (every
repair for the question's form, every round critiqued) and :func:`replay` walks the recorded rounds with
the loop's own decisions (:func:`program.sharp.wants_critic`, :func:`~program.sharp.p_right`,
:func:`~program.sharp.next_step`, :func:`~program.sharp.select`) to the prediction a live run with that
policy returns: its answer, evidence, trace, stop reason and LM cost (the calls of the rounds it reached,
the critic's only where the policy asks for it), without calling the model. Settings that change what a
round reads (k schedule, evidence cap, sub-question k, the prompts) need a new recording.

A record is a plain JSON dict; recordings are kept as JSONL, one line per question, and an interrupted
recording resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import dspy

from optimize.evaluate import EvalResult, aggregate, by_type, error_row
from optimize.metrics import question_row
from program.batch import MAX_FAILED_IN_A_ROW, FailureStreak, failure_text, run_each
from program.digest import digest
from program.errors import ConfigError, SharpError
from program.lm.accounting import recording, summarize
from program.sharp import (
    POLICY_FIELDS,
    SharpConfig,
    SharpRAG,
    gate_probability,
    next_step,
    p_right,
    select,
    wants_critic,
)
from program.steps import Budget, Tracer, check_question, prediction
from program.types import Passage

log = logging.getLogger(__name__)

FORMAT = 3  # 3: answer-critic rounds (draft, retrieve, decompose), each critiqued


class ReplayError(SharpError):
    """A record cannot answer the policy asked of it (a repair it did not record, an older format)."""


# ---- recording ---------------------------------------------------------------------------------
def reading(program: SharpRAG) -> str:
    """A digest of what decides what SHARP's rounds read and answer: the config less its policy fields, and
    the predictors' prompts (instructions, demos). A recording is replayable by a program with the same."""
    from program.saved import without_lms

    config = program.config.model_dump(mode="json", exclude=set(POLICY_FIELDS))
    return digest({"config": config, "state": without_lms(program.dump_state())}, 16)


def reading_key(program: SharpRAG, examples: Sequence[Any], extra: Any = None) -> str:
    """The name of a recording: what the rounds read, of which questions, with what (LM, retriever)."""
    return digest({"reading": reading(program), "ids": [getattr(e, "id", None) for e in examples], "extra": extra}, 16)


def check_reading(records: Iterable[dict], program: SharpRAG) -> None:
    """Refuse records made by a program that reads otherwise (other prompts or reading settings)."""
    mine = reading(program)
    other = {r.get("reading") for r in records if not r.get("error")} - {mine}
    if other:
        raise ConfigError(
            f"the recording was made by a program that reads otherwise (reading {sorted(map(str, other))}, this "
            f"program {mine}: other prompts, demos or reading settings); record again with this program"
        )


def _plain(rnd: dict) -> dict:
    """A round as JSON: its evidence as ids, titles and scores."""
    out = dict(rnd)
    out["evidence"] = [{"id": p.id, "title": p.title, "score": round(float(p.score), 6)} for p in rnd["evidence"]]
    return out


def record_question(program: SharpRAG, question: str, critique: bool = True) -> dict:
    """Run ``program``'s loop in explore mode: the draft and every repair for the question's form, each
    round judged and (with ``critique``) critiqued."""
    cfg = program.config
    q, truncated = check_question(question, cfg.max_question_chars)
    with recording() as ledger:
        tr = Tracer(Budget(max_lm_calls=None), ledger)
        run = program.run(q, tr, explore=True, critique=critique)
    return {
        "format": FORMAT,
        "question": q,
        "truncated": truncated,
        "form": run.form,
        "queries": list(run.pool.by_query),
        "rounds": [_plain(r) for r in run.rounds],
        "critiqued": critique,
        "reading": reading(program),
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


def read_records(path: Path, examples: Iterable[Any]) -> dict[str, dict]:
    """The records of ``examples`` in the recording at ``path``, read only (nothing is recorded): a
    ReplayError names the file and the questions it lacks."""
    path = Path(path)
    if not path.is_file():
        raise ReplayError(f"no recording at {path}")
    done = _read(path)
    ids = [getattr(e, "id", None) for e in examples]
    missing = [i for i in ids if i not in done]
    if missing:
        raise ReplayError(
            f"{path} lacks {len(missing)} of the {len(ids)} questions (e.g. {', '.join(map(str, missing[:3]))}): "
            "record them first"
        )
    return {i: done[i] for i in ids}


def usable(rec: dict) -> bool:
    """A record this code can replay: the current format, no error, no LM service failure in a step."""
    if rec.get("error") or rec.get("format") != FORMAT:
        return False
    steps = [s for r in rec.get("rounds") or [] for s in [*(r.get("steps") or []), *(r.get("critic_steps") or [])]]
    return not any(s.get("lm_failure") for s in steps)


def _torn(path: Path) -> bool:
    """Whether ``path`` ends in a line without its newline (a write cut by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def pending(examples: Sequence[Any], path: str | Path | None) -> list[Any]:
    """The examples a recording at ``path`` still lacks (or holds as failed, or in an older format)."""
    done = _read(Path(path)) if path else {}
    return [ex for ex in examples if not (ex.id in done and usable(done[ex.id]))]


def record(
    program: SharpRAG,
    examples: Sequence[Any],
    path: str | Path | None = None,
    threads: int = 1,
    max_failed_in_a_row: int | None = MAX_FAILED_IN_A_ROW,
    critique: bool | Callable[[Any], bool] = True,
) -> dict[str, dict]:
    """Record every example (resuming from ``path``); return id -> record. ``critique``: whether the critic
    reads every round (or a function of the example saying so).

    A question that raised (a failure of the LM service among others: program/steps.py) is kept as a record
    with ``error`` set, scored as a failed row, and recorded again by a resumed run; ``max_failed_in_a_row``
    failures one after another stop the recording (RunAbortedError)."""
    if not isinstance(program, SharpRAG):
        raise ConfigError(f"replay records SHARP trajectories; {type(program).__name__} has no repair loop")
    path = Path(path) if path else None
    done = {k: v for k, v in (_read(path) if path else {}).items() if usable(v)}
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
            rec = record_question(program, ex.question, critique(ex) if callable(critique) else critique)
        except Exception as exc:
            log.warning("recording question %s failed: %s", ex.id, exc)
            rec = {"format": FORMAT, "error": failure_text(exc)}
        rec["id"] = ex.id
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        if path:
            with lock, path.open("a") as fh:
                fh.write(json.dumps(rec, default=str) + "\n")
        return rec

    streak = FailureStreak(max_failed_in_a_row, f"the records so far (in {path})" if path else "the records so far")
    for n, rec in enumerate(run_each(one, todo, threads), 1):
        done[rec["id"]] = rec
        streak.see(bool(rec.get("error")), rec.get("error"))
        if n == 1 or n % 10 == 0 or n == len(todo):
            log.info("recorded %d/%d questions (%.1f s the last)", n, len(todo), rec.get("seconds", 0.0))
    return done


# ---- replay ------------------------------------------------------------------------------------
def _seconds(steps: Iterable[dict]) -> float:
    return sum(float(s.get("seconds") or 0) for s in steps)


def judge_recorded(rnd: dict, policy: SharpConfig, form: str = "bridge", critiqued: bool = True) -> dict:
    """A recorded round judged as ``policy`` judges it live: its gate probability under the policy's gate,
    the critique only where the policy would have asked for it, its P(right)."""
    out = dict(rnd)
    if rnd.get("answer") is None:
        out.update(p_gate=None, critique=None, p_right=None, source=None, critic_used=False)
        return out
    p_gate = round(gate_probability(rnd["features"], policy), 4)
    used = wants_critic(p_gate, policy, form)
    if used and not critiqued:
        raise ReplayError("the policy asks the critic about a round the recording did not critique")
    critique = rnd.get("critique") if used else None
    p, source = p_right(rnd["features"], p_gate, critique, policy)
    out.update(p_gate=p_gate, critique=critique, p_right=round(p, 4), source=source, critic_used=used)
    return out


def replay(rec: dict, policy: SharpConfig) -> dspy.Prediction:
    """The prediction a live run with ``policy`` would have returned, built from ``rec``: the recorded rounds
    walked with the loop's own decisions."""
    if rec.get("error"):
        raise ReplayError(rec["error"])
    if rec.get("format") != FORMAT:
        raise ReplayError(f"the record is format {rec.get('format')}, this code replays format {FORMAT}; record again")
    by_action = {r["action"]: r for r in rec["rounds"]}
    # a question cut to max_question_chars: the note a live trace opens with (program.steps.traced)
    cut = {"role": "input", "note": f"question truncated to {policy.max_question_chars} characters"}
    steps: list[dict] = [cut] if rec.get("truncated") else []
    calls: list[dict] = []
    seconds = 0.0
    rounds: list[dict] = []
    action: str | None = "draft"
    stop = ""
    while action is not None:
        if action not in by_action:
            raise ReplayError(f"the policy runs the {action!r} repair, which the recording did not record")
        rnd = judge_recorded(by_action[action], policy, rec["form"], rec.get("critiqued", True))
        rnd["round"] = len(rounds)
        steps += [_in_round(s, rnd["round"]) for s in rnd["steps"]]
        calls += rnd["calls"]
        seconds += float(rnd["seconds"])
        if rnd["critic_used"]:
            steps += [_in_round(s, rnd["round"]) for s in rnd["critic_steps"]]
            calls += rnd["critic_calls"]
            seconds += _seconds(rnd["critic_steps"])
        steps.append(_judgement(rnd, policy, rec["form"]))
        rounds.append(rnd)
        action, stop = next_step(rounds, rec["form"], policy, policy.budget.spent(summarize(calls), seconds))
    best = select(rounds, policy)
    steps.append({"role": "select", "round": best["round"], "action": best["action"], "answer": best["answer"],
                  "p_right": best["p_right"]})  # fmt: skip
    for n, step in enumerate(steps):
        step["step"] = n
    return prediction(
        SharpRAG.SYSTEM,
        steps,
        calls,
        answer=best["answer"],
        stop_reason=stop,
        passages=[Passage(p["id"], p["title"], "", p.get("score", 0.0)) for p in best["evidence"]],
        cited=best["cited_ids"],
        sub_queries=best.get("sub_questions") or [],
        queries=rec.get("queries") or [],
        retries=len(rounds) - 1,
        recorded_seconds=round(seconds, 4),
    )


def _in_round(step: dict, round_no: int) -> dict:
    """A recorded step as the round a live run reaches it in (another order than the recording's)."""
    return {**step, "round": round_no} if "round" in step else dict(step)


def _judgement(rnd: dict, policy: SharpConfig, form: str) -> dict:
    accepted = rnd["p_right"] is not None and rnd["p_right"] >= policy.accept_for(form)
    step = {"role": "judgement", "round": rnd["round"], "action": rnd["action"], "answer": rnd["answer"],
            "p_gate": rnd["p_gate"], "verdict": (rnd["critique"] or {}).get("verdict"), "p_right": rnd["p_right"],
            "source": rnd["source"], "accepted": accepted}  # fmt: skip
    if rnd.get("fallback"):
        step["fallback"] = rnd["fallback"]
    return step


def live_seconds(prediction: Any) -> float:
    """What the steps a replayed prediction used took when they ran: its estimated live cost."""
    return float(getattr(prediction, "recorded_seconds", 0.0) or 0.0)


def score(records: dict[str, dict], examples: Iterable[Any], policy: SharpConfig, seed: int = 0) -> EvalResult:
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
