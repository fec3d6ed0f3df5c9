"""`sharp record` and the LM-bound step of `sharp build`: SHARP's rounds on seeded train questions, recorded once
(optimize/recording.py) so that fitting the gate and tuning the policy replay them without calling the model.

Before the questions left are recorded, a probe records the first few of them and says what the rest will cost
(experiments/jobs/estimate.py: calls, tokens, time at the measured speed, money for a priced model), and
whether the reader writes token log-probabilities; then a progress line with its ETA follows the recording.
A model that does not answer stops it at the probe's first question; ``--max-cost`` stops it once that much
is spent. Whatever stops it, the questions recorded stay, and the same command resumes after them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.console import progress
from experiments.jobs.estimate import PROBE_QUESTIONS, CostGuard, Estimate, Price, Spent, check_max_cost
from optimize import recording
from program.errors import ConfigError, LMError, RunAbortedError
from program.lm import LMConfig

log = logging.getLogger(__name__)

ANSWERING_ROLES = ("planner", "critic", "generator")


def check_threads(lm_config: LMConfig, threads: int) -> None:
    """Refuse ``threads`` > 1 where a role's model is the embedded local one: it answers one question at a
    time, so threads would only queue behind each other."""
    if threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {threads}")
    local = sorted({lm_config.resolve(r).model for r in ANSWERING_ROLES if lm_config.resolve(r).is_local})
    if threads > 1 and local:
        raise ConfigError(
            f"--threads {threads}: the embedded model {', '.join(local)} answers one question at a time, so threads "
            "would only wait for each other; leave --threads out, or serve the model (`sharp lm serve --parallel "
            f"{threads}`, then --lm openai/local --api-base http://127.0.0.1:8008/v1) or use a remote API"
        )


def model_of(lm_config: LMConfig) -> str:
    """The one model the answering roles use (a build is for one model)."""
    models = sorted({lm_config.resolve(r).model for r in ANSWERING_ROLES})
    if len(models) != 1:
        raise ConfigError(f"a program is built for one model; the roles use several: {', '.join(models)}")
    return models[0]


@dataclass
class Recording:
    """What to record: ``program``'s rounds of ``examples`` into ``path`` (see optimize.recording.record)."""

    program: Any
    examples: Sequence[Any]
    path: Path
    passages: Any
    price: Price
    actions: tuple[str, ...] | None = None
    focus_when: str = "flagged"
    critique: bool | Callable[[Any], bool] = False
    threads: int = 1
    max_cost: float | None = None
    command: str = "the same command"

    def __post_init__(self) -> None:
        check_max_cost(self.max_cost, self.price)


@dataclass
class Recorded:
    """What a recording run did: the questions it had left, the estimate it made (None: nothing left), what it
    spent, and whether the reader wrote log-probabilities (None: nothing recorded now)."""

    path: Path
    questions: int
    left: int
    estimate: Estimate | None = None
    spent: Spent = field(default_factory=Spent)
    logprobs: bool | None = None
    seconds: float = 0.0


def record_rounds(
    job: Recording,
    *,
    show: bool = True,
    on_estimate: Callable[[Estimate, bool | None], None] | None = None,
) -> Recorded:
    """Record what ``job.path`` lacks: a probe of the first questions left, the estimate of the rest (shown,
    and handed to ``on_estimate``, which may stop the run by raising), then the rest with a progress line."""
    left = recording.pending(job.examples, job.path, job.program, job.actions, job.focus_when, job.critique)
    out = Recorded(job.path, len(job.examples), len(left))
    if not left:
        log.info("%s holds every round of its %d questions: nothing to record", job.path, len(job.examples))
        return out
    guard = CostGuard(job.price, job.max_cost, where=str(job.path), command=job.command)
    t0 = time.perf_counter()
    n_probe = min(len(left), max(PROBE_QUESTIONS, job.threads))
    _probe(job, left[:n_probe], guard)
    wall = time.perf_counter() - t0
    probe = Spent(**vars(guard.spent))
    out.logprobs = probe.logprobs > 0 if probe.questions > probe.failed else None
    out.estimate = Estimate.scale(probe, wall, len(left) - n_probe, job.price, job.threads)
    say = progress.terminal.err_console.print if show else (lambda *a, **k: None)
    for line in out.estimate.lines():
        say(line, markup=False, highlight=False, soft_wrap=True)
        log.info("%s", line)
    if on_estimate is not None:
        on_estimate(out.estimate, out.logprobs)
    rest = left[n_probe:]
    if rest:
        tally = progress.Tally(len(left), done=n_probe, prior_seconds=wall / n_probe)
        with progress.showing(f"recording {job.path.name}", tally, enabled=show) as shown:

            def each(rec: dict, calls: dict) -> None:
                shown.advance(failed=bool(rec.get("error")))
                guard.add(rec, calls)

            _record(job, rest, each)
    out.spent, out.seconds = guard.spent, time.perf_counter() - t0
    return out


def _record(job: Recording, examples: Sequence[Any], on_each: Callable[[dict, dict], None], **kw: Any) -> dict:
    return recording.record(
        job.program,
        examples,
        job.path,
        job.threads,
        critique=job.critique,
        actions=job.actions,
        passages=job.passages,
        focus_when=job.focus_when,
        on_each=on_each,
        **kw,
    )


def _probe(job: Recording, examples: Sequence[Any], guard: CostGuard) -> None:
    """Record ``examples``, stopping at the first that fails: a model that does not answer is said before any
    more is asked of it."""
    try:
        _record(job, examples, guard.add, max_failed_in_a_row=1)
    except RunAbortedError as exc:
        cause = str(exc).split("the last one: ", 1)[-1].split(". the records so far", 1)[0]
        raise LMError(
            f"the model {job.price.model} did not answer the first question recorded ({cause}); no question was "
            f"recorded. Check that it is reachable (--lm, --api-base, its API key), then rerun {job.command}"
        ) from None
