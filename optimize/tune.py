"""Optuna search over SHARP's thresholds and schedule, scored by replay wherever possible.

The search space covers the confidence threshold, the retry cap, the k schedule (start and
step), the evidence cap and the retrieval mode. Threshold and retry cap are *policy*
parameters: they are scored from a recording (:mod:`optimize.replay`) without calling the
model. The other three change retrieval; each distinct combination is recorded once (live,
through the LM cache) and then reused by every trial that shares it.

Objectives: ``f1`` or ``em`` (maximize), or ``f1-cost`` (maximize F1, minimize LM calls per
question: a Pareto front). Studies live in any Optuna RDB storage; a study of the same name
resumes, trials that a killed worker left running are failed by the heartbeat and retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from program.config import StrictConfig
from program.errors import ConfigError
from program.sharp import SharpConfig

log = logging.getLogger(__name__)

POLICY_PARAMS = ("confidence_threshold", "max_retries")
RETRIEVAL_PARAMS = ("k_start", "k_step", "evidence_cap", "mode")
Mode = Literal["dense", "bm25", "hybrid"]


class SearchSpace(StrictConfig):
    """Ranges and choices per parameter; ``fixed`` pins a parameter to one value (not searched)."""

    threshold_low: float = Field(0.05, ge=0.0, le=1.0)  # token P(sufficient) can sit far below 0.5
    threshold_high: float = Field(0.95, ge=0.0, le=1.0)
    max_retries: tuple[int, ...] = (0, 1, 2, 3)
    k_start: tuple[int, ...] = (3, 5)
    k_step: tuple[int, ...] = (0, 2)
    evidence_cap: tuple[int, ...] = (3, 4, 5)  # at most plain RAG's five passages
    mode: tuple[Mode, ...] = ("bm25", "hybrid")
    fixed: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        if self.threshold_low > self.threshold_high:
            raise ValueError("threshold_low must not exceed threshold_high")
        for name in ("max_retries", "k_start", "k_step", "evidence_cap", "mode"):
            if not getattr(self, name):
                raise ValueError(f"{name} needs at least one choice")
        if min(self.max_retries) < 0 or min(self.k_start) < 1 or min(self.k_step) < 0 or min(self.evidence_cap) < 1:
            raise ValueError("max_retries and k_step must be >= 0; k_start and evidence_cap >= 1")
        unknown = set(self.fixed) - set(POLICY_PARAMS) - set(RETRIEVAL_PARAMS)
        if unknown:
            raise ValueError(
                f"fixed: unknown parameter(s) {sorted(unknown)}; valid: {', '.join(POLICY_PARAMS + RETRIEVAL_PARAMS)}"
            )
        return self

    @property
    def max_recorded_retries(self) -> int:
        """The retries a recording must cover for every policy in the space."""
        return int(self.fixed.get("max_retries", max(self.max_retries)))


def suggest(trial: Any, space: SearchSpace) -> dict[str, Any]:
    """One point of ``space`` from an Optuna trial (fixed parameters are not suggested)."""
    fixed = space.fixed
    params: dict[str, Any] = {}
    params["confidence_threshold"] = (
        fixed.get("confidence_threshold")
        if "confidence_threshold" in fixed
        else trial.suggest_float("confidence_threshold", space.threshold_low, space.threshold_high)
    )
    for name in ("max_retries", "k_start", "k_step", "evidence_cap", "mode"):
        params[name] = fixed[name] if name in fixed else trial.suggest_categorical(name, list(getattr(space, name)))
    return params


def apply_params(base: SharpConfig, params: Mapping[str, Any]) -> tuple[SharpConfig, dict]:
    """The program config and the retriever overrides a parameter point stands for.

    The k schedule is ``k_start + i * k_step`` for every round up to the retry cap; the evidence
    cap is raised to the first k when below it (the config requires cap >= k_0).
    """
    values = base.model_dump()
    if "max_retries" in params:
        values["max_retries"] = int(params["max_retries"])
    if "confidence_threshold" in params:
        values["confidence_threshold"] = float(params["confidence_threshold"])
    if "k_start" in params or "k_step" in params:
        start = int(params.get("k_start", base.k_schedule[0]))
        step = int(params.get("k_step", 0))
        values["k_schedule"] = tuple(start + i * step for i in range(values["max_retries"] + 1))
    if "evidence_cap" in params:
        values["evidence_cap"] = max(int(params["evidence_cap"]), values["k_schedule"][0])
    retriever = {"mode": params["mode"]} if "mode" in params else {}
    return SharpConfig.from_mapping(values), retriever


def params_of(config: SharpConfig, mode: str) -> dict[str, Any] | None:
    """The search-space point that stands for ``config`` with retrieval ``mode``, or None when its k
    schedule is not arithmetic (``apply_params`` could not reproduce it)."""
    ks = config.k_schedule
    step = ks[1] - ks[0] if len(ks) > 1 else 0
    if any(b - a != step for a, b in zip(ks, ks[1:])):
        return None
    return {
        "confidence_threshold": config.confidence_threshold,
        "max_retries": config.max_retries,
        "k_start": ks[0],
        "k_step": step,
        "evidence_cap": config.evidence_cap,
        "mode": mode,
    }


def in_space(params: Mapping[str, Any], space: SearchSpace) -> bool:
    """Whether every free parameter of ``params`` is a value the space can suggest."""
    for name, value in params.items():
        if name in space.fixed:
            continue
        if name == "confidence_threshold":
            if not space.threshold_low <= float(value) <= space.threshold_high:
                return False
        elif value not in getattr(space, name):
            return False
    return True


def enqueue_baseline(study: Any, space: SearchSpace, params: Mapping[str, Any] | None) -> bool:
    """Queue ``params`` (the starting config) as a new study's first trial, so the tuned policy is
    reported against the defaults it replaces. False (nothing queued) when the study already has
    trials or the point lies outside the space."""
    if params is None or study.get_trials(deepcopy=False):
        return False
    if not in_space(params, space):
        log.info("the starting config %s lies outside the search space; no baseline trial", dict(params))
        return False
    study.enqueue_trial({k: v for k, v in params.items() if k not in space.fixed}, user_attrs={"baseline": True})
    return True


def baseline_trial(study: Any) -> Any | None:
    """The finished trial queued by :func:`enqueue_baseline`, if any."""
    from optuna.trial import TrialState

    return next(
        (t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.user_attrs.get("baseline")),
        None,
    )


def recording_params(params: Mapping[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The parameters that decide a recording: retrieval ones, with the k schedule over every round
    the space may use (so policies with fewer retries replay from the same record)."""
    out = {k: params[k] for k in RETRIEVAL_PARAMS if k in params}
    out["max_retries"] = space.max_recorded_retries
    return out


# ---- objectives ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Objective:
    name: str
    directions: tuple[str, ...]
    keys: tuple[str, ...]

    def values(self, metrics: Mapping[str, Any]) -> float | tuple[float, ...]:
        vals = tuple(float(metrics[k] or 0.0) for k in self.keys)
        return vals[0] if len(vals) == 1 else vals

    @property
    def multi(self) -> bool:
        return len(self.directions) > 1


OBJECTIVES: dict[str, Objective] = {
    "f1": Objective("f1", ("maximize",), ("f1",)),
    "em": Objective("em", ("maximize",), ("em",)),
    "f1-cost": Objective("f1-cost", ("maximize", "minimize"), ("f1", "lm_calls_per_q")),
}


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ConfigError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


# ---- studies -------------------------------------------------------------------------------------
def open_study(storage: str, name: str, objective: Objective, seed: int = 0, heartbeat_s: int = 60) -> Any:
    """Create or resume study ``name`` in ``storage`` (any Optuna RDB URL)."""
    import warnings

    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        rdb = RDBStorage(
            storage,
            heartbeat_interval=heartbeat_s,
            grace_period=3 * heartbeat_s,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
        )
    try:
        study = optuna.create_study(
            storage=rdb,
            study_name=name,
            load_if_exists=True,
            directions=list(objective.directions),
            sampler=optuna.samplers.TPESampler(seed=seed),
        )
    except ValueError as exc:  # e.g. the stored study has other directions
        raise ConfigError(
            f"study {name!r} in {storage} cannot be resumed with objective "
            f"{objective.name!r}: {exc}; choose another --study name"
        ) from None
    stored = tuple(d.name.lower() for d in study.directions)
    if stored != objective.directions:
        raise ConfigError(
            f"study {name!r} optimizes {stored}, not {objective.directions} ({objective.name}); "
            f"choose another --study name"
        )
    return study


def finished_trials(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


@dataclass
class TrialOutcome:
    params: dict
    metrics: dict
    seconds: float
    recorded: bool


@dataclass
class Tuner:
    """An Optuna objective: parameters -> (recording, replay) -> objective values.

    ``score(params)`` returns ``(metrics, recorded)``: the metrics of the policy and whether a new
    live recording was needed. Each trial's metrics and timing go to the trial's user attributes.
    """

    space: SearchSpace
    objective: Objective
    score: Callable[[dict], tuple[dict, bool]]
    outcomes: list[TrialOutcome] = field(default_factory=list)

    def __call__(self, trial: Any) -> float | tuple[float, ...]:
        params = suggest(trial, self.space)
        t0 = time.perf_counter()
        metrics, recorded = self.score(params)
        seconds = time.perf_counter() - t0
        trial.set_user_attr("metrics", {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        trial.set_user_attr("params", params)
        trial.set_user_attr("seconds", seconds)
        trial.set_user_attr("recorded", recorded)
        self.outcomes.append(TrialOutcome(params, metrics, seconds, recorded))
        return self.objective.values(metrics)


def run_study(study: Any, tuner: Tuner, n_trials: int, callbacks: list | None = None) -> int:
    """Run trials until the study has ``n_trials`` finished ones (counting every worker's); return how
    many this process finished."""
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    remaining = max(0, n_trials - finished_trials(study))
    before = len(tuner.outcomes)
    if remaining:
        # other workers on the same storage count too: stop when the study as a whole has n_trials
        stop = MaxTrialsCallback(n_trials, states=(TrialState.COMPLETE, TrialState.PRUNED))
        study.optimize(tuner, n_trials=remaining, callbacks=[*(callbacks or []), stop], catch=())
    return len(tuner.outcomes) - before


def _lm_calls(trial: Any) -> float:
    calls = (trial.user_attrs.get("metrics") or {}).get("lm_calls_per_q")
    return float(calls) if calls is not None else float("inf")


def best_trial(study: Any, objective: Objective) -> Any:
    """The single best trial (ties: the fewest LM calls a question, then the earliest), or on a
    Pareto front the one with the highest first objective (ties: the cheaper).

    Ties are common: a replayed policy that stops one retry earlier on questions it already
    answers right scores the same, and costs less; Optuna's ``best_trial`` would keep whichever
    came first (usually the enqueued defaults)."""
    if not objective.multi:
        top = study.best_trial.value
        tied = [t for t in study.get_trials(deepcopy=False) if t.value is not None and abs(t.value - top) <= 1e-12]
        return min(tied, key=lambda t: (_lm_calls(t), t.number))
    front = study.best_trials
    if not front:
        raise ConfigError("the study has no finished trial yet")
    return max(front, key=lambda t: (t.values[0], -t.values[1]))


def full_params(trial: Any, space: SearchSpace) -> dict[str, Any]:
    """All parameters of a trial, fixed ones included."""
    return dict(trial.user_attrs.get("params") or {**space.fixed, **trial.params})
