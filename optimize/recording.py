"""Record a question's every round once, so that any SHARP policy can be scored from it (optimize/replay.py).

:func:`record` runs the program's own loop (:func:`program.sharp.loop.play`) in explore mode (every repair for the
question's form, or those asked; every comparison composed too) and keeps what each round *read*: a plain JSON
dict per question (passages as ids, titles and scores; their text is looked up in the index at replay time, so
new rules over the text cost no model call either), one line per question in a JSONL file. Each round is
stamped with what decides its reads (:func:`reading`: the predictors it calls and the config fields it reads),
so a recording grows: a question whose record lacks a round this program would record (a recording of the
drafts alone, asked now for every repair) is recorded again from the rounds it has, without reading those
twice; an interrupted recording resumes where it stopped.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from program.digest import digest
from program.errors import ConfigError
from program.lm.accounting import recording
from program.serving.batch import MAX_FAILED_IN_A_ROW, FailureStreak, failure_text, run_each
from program.sharp.forms import question_form
from program.sharp.loop import play
from program.sharp.module import SharpRAG
from program.sharp.policy import Explore
from program.sharp.rounds import FORMAT, REPAIRS_FOR, PassageLookup, RecordedRounds, ReplayError, titles_only
from program.tracing import Budget, Tracer, check_question

log = logging.getLogger(__name__)

__all__ = ["FORMAT", "check_reading", "complete", "pending", "read_records", "reading", "reading_key", "record"]


# ---- recording ---------------------------------------------------------------------------------
# what each action's reads depend on: the predictors it calls and the config fields it reads. A repair that
# starts from the draft's answer (a retrieval repair's search, a focused read's entity) depends on the draft too
READS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "draft": (
        ("generator",),
        (
            "ranker",
            "k_schedule",
            "passage_chars",
            "generator_adapter",
            "max_question_chars",
            "evidence",
            "selector",
            "sentence_passages",
            "sentence_budget",
        ),
    ),  # fmt: skip
    "retrieve": (("generator",), ("evidence_cap",)),
    "focus": (("focuser",), ("sub_k", "evidence_cap")),
    "compare": (
        ("planner", "generator", "composer"),
        (
            "ranker",
            "sub_k",
            "max_sub_questions",
            "passage_chars",
            "generator_adapter",
            "structured_adapter",
            "planner_max_tokens",
            "compose_max_tokens",
            "max_question_chars",
        ),
    ),  # fmt: skip
    "chain": (
        ("hop_planner", "generator"),
        (
            "ranker",
            "sub_k",
            "evidence_cap",
            "passage_chars",
            "hop_passage_chars",
            "generator_adapter",
            "structured_adapter",
            "planner_max_tokens",
            "max_question_chars",
        ),
    ),  # fmt: skip
    "critic": (("critic",), ("passage_chars", "structured_adapter", "critic_max_tokens")),
}
AFTER_DRAFT = ("retrieve", "focus")
# what code decides of an action's reads, versioned: a change to it (the comparisons planned by rule) makes the
# action's recorded rounds stale as a prompt change would
# (chain 4: a hop reads the entity's own passage alone first)
CODE_VERSIONS = {"compare": 3, "chain": 4}


def reading(program: SharpRAG, action: str = "draft", code_version: int | None = None) -> str:
    """A digest of what decides what ``action``'s reads are: the predictors it calls (their instructions and
    demos) and the config fields it reads, those at their default left out (a setting added later, at a
    default that reads as before, leaves a recording replayable). A recorded round is replayable by a program
    with the same. ``code_version``: the digest under an earlier :data:`CODE_VERSIONS` entry (a migration's
    old stamp)."""
    from program.serving.saved import without_lms

    predictors, fields = READS[action]
    values = program.config.model_dump(mode="json", include=set(fields))
    defaults = type(program.config)().model_dump(mode="json", include=set(fields))
    config = {k: v for k, v in sorted(values.items()) if v != defaults.get(k)}
    state = {name: without_lms(getattr(program, name).dump_state()) for name in predictors}
    parts = {"action": action, "config": config, "state": state}
    version = CODE_VERSIONS.get(action) if code_version is None else code_version
    if version is not None:
        parts["code"] = version
    if action in AFTER_DRAFT:
        parts["draft"] = reading(program, "draft")
    return digest(parts, 16)


def readings(program: SharpRAG) -> dict[str, str]:
    """Every action's reading digest (what a recording's rounds are stamped with)."""
    return {action: reading(program, action) for action in READS}


# actions every recording's name digests; a later action (the chain) only where the program can reach it, so
# the name of a recording made by a program that never chains stays what it was before chains existed
NAMED_ALWAYS = ("draft", "retrieve", "compare", "focus", "critic")


def reading_key(program: SharpRAG, examples: Sequence[Any], extra: Any = None) -> str:
    """The name of a recording: what the rounds read, of which questions, with what (LM, retriever)."""
    ids = [getattr(e, "id", None) for e in examples]
    reachable = set(program.config.reachable_repairs())
    named = {a: d for a, d in readings(program).items() if a in NAMED_ALWAYS or a in reachable}
    return digest({"reading": named, "ids": ids, "extra": extra}, 16)


def check_reading(records: Iterable[dict], program: SharpRAG, actions: Iterable[str] | None = None) -> None:
    """Refuse records holding a round made by a program that reads otherwise (other prompts or reading
    settings for that round's action); only rounds of ``actions`` when given (what a replay will reach)."""
    wanted = None if actions is None else set(actions)
    mine = readings(program)
    other = sorted(
        {
            f"{rnd['action']} {rnd.get('reading')}"
            for rec in records
            if not rec.get("error")
            for rnd in rec.get("rounds") or []
            if rnd.get("reading") != mine[rnd["action"]] and (wanted is None or rnd["action"] in wanted)
        }
    )
    if other:
        raise ConfigError(
            f"the recording holds rounds made by a program that reads otherwise ({', '.join(other[:4])}; this "
            f"program: {', '.join(f'{a} {d}' for a, d in mine.items())}: other prompts, demos or reading "
            "settings); record again with this program"
        )


class _Resumed:
    """The rounds a record already holds for this program's reading, else the program answering live: an
    interrupted or narrower recording (the draft alone) grows without reading a round twice. ``passages``
    gives recorded passages their text back (a repair re-reads the draft's evidence)."""

    def __init__(self, program: SharpRAG, known: dict | None, passages: PassageLookup):
        self.program, mine = program, readings(program)
        kept = [r for r in (known or {}).get("rounds") or [] if r.get("reading") == mine[r["action"]]]
        self.known = RecordedRounds({**known, "rounds": kept}, passages) if known and kept else None

    def read(self, run: Any, action: str, policy: Any, tr: Tracer) -> Any:
        if self.known is not None and action in self.known.by_action:
            return self.known.read(run, action, policy, tr)
        return self.program.read(run, action, policy, tr)

    def branch(self, run: Any, rnd: Any, tr: Tracer) -> Any:
        if self.known is not None and rnd.branch_tried:  # a recorded chain round, its branch recorded with it
            return self.known.branch(run, rnd, tr)
        return self.program.branch(run, rnd, tr)

    def compose(self, run: Any, rnd: Any, tr: Tracer) -> Any:
        if self.known is not None and self.known.by_action.get(rnd.action, {}).get("read") is not None:
            return self.known.compose(run, rnd, tr)
        return self.program.compose(run, rnd, tr)

    def critique(self, run: Any, rnd: Any, tr: Tracer) -> dict | None:
        if rnd.critique is not None:
            return rnd.critique
        return self.program.critique(run, rnd, tr)

    def spent(self, policy: Any, tr: Tracer) -> str | None:
        return None


def record_question(
    program: SharpRAG,
    question: str,
    critique: bool = True,
    known: dict | None = None,
    actions: Sequence[str] | None = None,
    passages: PassageLookup = titles_only,
    focus_when: str = "rejected",
) -> dict:
    """Run ``program``'s loop in explore mode: the draft and every repair for the question's form (those in
    ``actions`` only, when given), and with ``critique`` the critic on each round. Rounds ``known`` (an
    earlier record of the question) holds for this program's reading are kept, not read again; ``focus_when``
    "flagged" records a focused read only after a flagged draft (what policies that focus so replay)."""
    cfg = program.config
    q, truncated = check_question(question, cfg.max_question_chars)
    source = _Resumed(program, known, passages)
    with recording() as ledger:
        tr = Tracer(Budget(max_lm_calls=None), ledger)
        beam = cfg.chain_beam is not None  # the program carries a beam: every chain's branch is read
        run = play(q, question_form(q), source, Explore(critique, actions, focus_when, beam), tr)
    mine = readings(program)
    rounds = []
    for rnd in run.rounds:
        out = rnd.to_record()
        out["reading"] = mine[rnd.action]
        rounds.append(out)
    return {
        "format": FORMAT,
        "question": q,
        "truncated": truncated,
        "form": run.form,
        "queries": list(run.queries),
        "rounds": rounds,
        "critiqued": critique,
        "error": None,
    }


def _read(path: Path) -> dict[str, dict]:
    """The records of the recording at ``path`` (a committed one may be gzipped: NAME.jsonl.gz), the last of
    each question's."""
    done = {}
    if path.exists():
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        for line in text.splitlines():
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


def complete(
    rec: dict | None,
    program: SharpRAG,
    actions: Sequence[str] | None = None,
    critique: bool = False,
    focus_when: str = "rejected",
) -> bool:
    """Whether ``rec`` holds, for ``program``'s reading, the draft and every repair of its form (those in
    ``actions``; a focused read only after a flagged draft with ``focus_when`` "flagged"), critiqued where
    ``critique`` asks it."""
    if not rec or not usable(rec) or (critique and not rec.get("critiqued")):
        return False
    mine = readings(program)
    kept = [r for r in rec["rounds"] if r.get("reading") == mine.get(r["action"])]
    have = {r["action"] for r in kept}
    want = {"draft", *(a for a in REPAIRS_FOR[rec["form"]] if actions is None or a in actions)}
    draft = next((r for r in kept if r["action"] == "draft"), None)
    if focus_when == "flagged" and draft is not None and not _draft_flagged(rec, draft):
        want.discard("focus")
    if program.config.chain_beam is not None and any(_unbeamed(r) for r in kept if r["action"] == "chain"):
        return False  # a chain whose hop 1 answered, its branch not read: read it (the chain itself is kept)
    return want <= have


def _unbeamed(chain: dict) -> bool:
    """Whether a recorded chain round lacks the branch a beam replays (its hop 1 answered, no branch read)."""
    return bool(chain.get("hop_answers")) and "branch" not in chain


def _draft_flagged(rec: dict, draft: dict) -> bool:
    """Whether a recorded draft is flagged (program.sharp.loop.flagged: what the reader wrote, titles enough)."""
    from program.sharp.loop import flagged
    from program.sharp.rounds import Round, Run

    return flagged(Run(rec["question"], rec["form"]), Round.from_record(draft, titles_only))


def pending(
    examples: Sequence[Any],
    path: str | Path | None,
    program: SharpRAG,
    actions: Sequence[str] | None = None,
    focus_when: str = "rejected",
    critique: bool | Callable[[Any], bool] = False,
) -> list[Any]:
    """The examples a recording at ``path`` still lacks, holds as failed, or holds without a round ``program``
    would record for them (critiqued, where ``critique`` says so of the example, as :func:`record` takes it)."""
    done = _read(Path(path)) if path else {}

    def crit(ex: Any) -> bool:
        return bool(critique(ex)) if callable(critique) else bool(critique)

    return [ex for ex in examples if not complete(done.get(ex.id), program, actions, crit(ex), focus_when)]


def _mend(path: Path) -> None:
    """Ready ``path`` for appends: its folder made, and a last line cut by a kill dropped (rewritten atomically:
    another worker reading or appending never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if _torn(path):
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in _read(path).values()))
        tmp.replace(path)


def record(
    program: SharpRAG,
    examples: Sequence[Any],
    path: str | Path | None = None,
    threads: int = 1,
    max_failed_in_a_row: int | None = MAX_FAILED_IN_A_ROW,
    critique: bool | Callable[[Any], bool] = True,
    actions: Sequence[str] | None = None,
    passages: PassageLookup = titles_only,
    focus_when: str = "rejected",
    on_each: Callable[[dict, dict], None] | None = None,
) -> dict[str, dict]:
    """Record every example (resuming from ``path``); return id -> record. ``critique``: whether the critic
    reads every round (or a function of the example saying so); ``actions``: the repairs to record (None:
    every repair of each question's form). A question whose record lacks a round is recorded again from
    the rounds it has (``passages`` gives their passages their text back: the index's, for a live program).

    A question that raised (a failure of the LM service among others: program/tracing.py) is kept as a record
    with ``error`` set, scored as a failed row, and recorded again by a resumed run; ``max_failed_in_a_row``
    failures one after another stop the recording (RunAbortedError).

    ``on_each(record, calls)``, where given, hears of every question recorded (in the calling thread, in the
    order they finish), ``calls`` the question's LM calls summed (program.lm.accounting.summarize: calls,
    tokens, seconds, cached calls); what it raises stops the recording (the questions already written
    stay, and a rerun resumes after them)."""
    if not isinstance(program, SharpRAG):
        raise ConfigError(f"replay records SHARP trajectories; {type(program).__name__} has no repair loop")
    path = Path(path) if path else None
    if path is not None and path.suffix == ".gz":
        raise ConfigError(f"{path}: a gzipped recording is read only (a committed one); record into a .jsonl")
    done = {k: v for k, v in (_read(path) if path else {}).items() if usable(v)}

    def crit(ex: Any) -> bool:
        return bool(critique(ex)) if callable(critique) else bool(critique)

    todo = [ex for ex in examples if not complete(done.get(ex.id), program, actions, crit(ex), focus_when)]
    lock = threading.Lock()
    if path:
        _mend(path)

    def one(ex: Any) -> tuple[dict, dict]:
        t0 = time.perf_counter()
        with recording() as calls:
            try:
                rec = record_question(program, ex.question, crit(ex), done.get(ex.id), actions, passages, focus_when)
            except Exception as exc:
                log.warning("recording question %s failed: %s", ex.id, exc)
                rec = {"format": FORMAT, "error": failure_text(exc)}
        rec["id"] = ex.id
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        if path:
            with lock, path.open("a") as fh:
                fh.write(json.dumps(rec, default=str) + "\n")
        return rec, calls.summary()

    streak = FailureStreak(max_failed_in_a_row, f"the records so far (in {path})" if path else "the records so far")
    _collect(run_each(one, todo, threads), done, streak, on_each, len(todo))
    return done


def _collect(results: Any, done: dict, streak: FailureStreak, on_each: Any, total: int) -> None:
    """The records as they finish, into ``done``: told to ``on_each``, their failures counted in ``streak``,
    every tenth logged; a stopped recording cancels the questions queued on the pool."""
    try:
        for n, (rec, spent) in enumerate(results, 1):
            done[rec["id"]] = rec
            if on_each is not None:
                on_each(rec, spent)
            streak.see(bool(rec.get("error")), rec.get("error"))
            if n == 1 or n % 10 == 0 or n == total:
                log.info("recorded %d/%d questions (%.1f s the last)", n, total, rec.get("seconds", 0.0))
    finally:
        results.close()
