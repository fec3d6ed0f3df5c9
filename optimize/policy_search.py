"""Optuna search over SHARP's policy, scored by replay.

The search space covers the accept threshold, when the critic is asked (off, in a band of the gate's
probability, always) and the band's floor, the repairs each question form gets and how many, and how the
answer is selected. Every one is a *policy* parameter: it decides which recorded rounds a live run reaches,
never what a round reads, so each trial is scored from one recording (:mod:`optimize.replay`) without
calling the model.

Objectives: ``f1`` or ``em`` (maximize), ``em-cost`` (EM less what the LM calls cost: :class:`CallCost`, the
one home of its weight and cap), or ``f1-cost`` (maximize F1, minimize LM calls per question: a Pareto
front). :class:`ReplayScorer` scores a policy from one recording. Studies live in any Optuna RDB storage or a
journal file (:mod:`optimize.storage`); a study of the same name resumes, with the objective it was scored
by (another call cost is refused). Several worker processes may share one
study: together they finish exactly the trials asked for, never draw the same random point, and a
trial that a killed worker left running is failed and queued again (at once on the same host, after a
missed heartbeat elsewhere).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.samplers import BaseSampler, TPESampler
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from pydantic import Field, create_model, model_validator

from optimize import recording, replay
from optimize.compiler import shared_retriever
from optimize.storage import open_storage
from optimize.workers import identity, is_gone
from program.config import StrictConfig
from program.errors import ConfigError
from program.sharp.module import SharpRAG
from program.sharp.policy import (  # noqa: F401 (the search choices, re-exported for the tune command and studies)
    BRIDGE_ORDERS,
    CHAIN_ORDERS,
    LEVERS,
    REPAIR_ORDERS,
    TUNED_FIELDS,
    YES_GRID,
    SharpConfig,
    bare_off,
)
from program.sharp.rounds import titles_only

log = logging.getLogger(__name__)

# the valid repair orders of each form's repairs (program.sharp.policy: BRIDGE_ORDERS, CHAIN_ORDERS, REPAIR_ORDERS)
ORDERS = {name: lever.valid for name, lever in LEVERS.items() if lever.repairs}
# the levers a space offers choices of (the others are searched over a float range: FLOATS)
_CHOICES = tuple(name for name, lever in LEVERS.items() if isinstance(lever.search, tuple))


def repairs_of(choice: str) -> tuple[str, ...]:
    """A repair-order choice ("compare,retrieve", "none") as the config's tuple."""
    return LEVERS["repair_bridge"].setting(choice)


class _Ranges(StrictConfig):
    """A search space's float ranges and pins; its choices per lever are fields derived from
    program.sharp.policy.LEVERS (:data:`SearchSpace`)."""

    threshold_low: float = Field(0.0, ge=0.0, le=1.0)
    threshold_high: float = Field(1.0, ge=0.0, le=1.0)
    floor_low: float = Field(0.0, ge=0.0, le=1.0)
    floor_high: float = Field(0.9, ge=0.0, le=1.0)
    fixed: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check(self) -> _Ranges:
        if self.threshold_low > self.threshold_high or self.floor_low > self.floor_high:
            raise ValueError("threshold_low/floor_low must not exceed threshold_high/floor_high")
        for name in _CHOICES:
            lever, choices = LEVERS[name], getattr(self, name)
            if not choices:
                raise ValueError(f"{name} needs at least one choice")
            if lever.off is None:  # a threshold: "off" or a probability
                bad = [c for c in choices if c != "off" and not (isinstance(c, float) and 0 <= c <= 1)]
                if bad:
                    raise ValueError(f"{name}: choices are 'off' or probabilities in [0, 1], not {bad}")
            elif lever.valid is not None:
                bad = [c for c in choices if c not in lever.valid]
                if bad:
                    what = "repair order(s)" if lever.repairs else "choice(s)"
                    raise ValueError(f"{name}: unknown {what} {bad}; valid: {', '.join(map(str, lever.valid))}")
        for name, value in list(self.fixed.items()):
            if name in LEVERS and LEVERS[name].has_off:  # YAML reads a bare `off` (--fix yes_threshold=off) as false
                self.fixed[name] = bare_off(value)
        unknown = set(self.fixed) - set(TUNED_FIELDS)
        if unknown:
            raise ValueError(f"fixed: unknown parameter(s) {sorted(unknown)}; valid: {', '.join(TUNED_FIELDS)}")
        return self

    @property
    def needs_critic(self) -> bool:
        """Whether a policy of the space may ask the critic (then the recording must be critiqued)."""
        return any(c != "off" for c in self.offered("ask_critic"))

    @property
    def focus_when_needed(self) -> str:
        """What the recording must hold of focused reads: after every rejected draft, or flagged ones only."""
        return "rejected" if "rejected" in self.offered("focus_when") else "flagged"

    @property
    def actions(self) -> tuple[str, ...]:
        """The repairs a policy of the space may run (the recording must hold them)."""
        found: set[str] = set()
        for name in ORDERS:
            for choice in self.offered(name):
                found.update(repairs_of(choice) if isinstance(choice, str) else choice)
        return tuple(sorted(found))

    def offered(self, name: str) -> list[Any]:
        """The values of lever ``name`` a policy of the space may take: its pin, else its choices."""
        return [self.fixed[name]] if name in self.fixed else list(getattr(self, name))


def _choice_type(name: str) -> Any:
    lever = LEVERS[name]
    if lever.repairs:
        return str  # an order, "compare,retrieve"
    if lever.off is None:
        return str | float  # "off" or a probability
    return SharpConfig.model_fields[name].annotation


# Ranges and choices per policy lever; ``fixed`` pins a lever to one value (not searched). Every lever is a
# policy: each trial replays one recording (optimize/replay.py). One field per lever with choices, its default
# the lever's own search (program.sharp.policy.LEVERS), so a lever declared there is searched here.
SearchSpace = create_model(
    "SearchSpace",
    __base__=_Ranges,
    __module__=__name__,
    **{name: (tuple[_choice_type(name), ...], LEVERS[name].search) for name in _CHOICES},  # type: ignore[call-overload]
)


def float_ranges(space: SearchSpace) -> dict[str, tuple[float, float]]:
    """The one range each float parameter of ``space`` is suggested from (and checked against)."""
    bounds = {"threshold": (space.threshold_low, space.threshold_high), "floor": (space.floor_low, space.floor_high)}
    return {name: bounds[lever.search] for name, lever in LEVERS.items() if isinstance(lever.search, str)}


def suggest(trial: Any, space: SearchSpace) -> dict[str, Any]:
    """One point of ``space`` from an Optuna trial (fixed parameters are not suggested)."""
    fixed = space.fixed
    params: dict[str, Any] = {}
    floats = float_ranges(space)
    for name in TUNED_FIELDS:
        if name in fixed:
            params[name] = fixed[name]
        elif _unsearched(name, space):
            continue  # a lever added later, offered only at its default: the program keeps its own value
        elif name in floats:
            params[name] = trial.suggest_float(name, *floats[name])
        else:
            params[name] = trial.suggest_categorical(name, list(getattr(space, name)))
    return params


def _unsearched(name: str, space: SearchSpace) -> bool:
    """Whether ``name`` is a lever added after programs were shipped (SharpConfig.SAVED_ONLY_WHEN_SET: ``chain_beam``)
    that ``space`` offers at its default alone: not suggested, so a search over a space without it draws, saves and
    rebuilds what it did before the lever existed (the base program's value stands: a ``--set`` is kept)."""
    if name not in SharpConfig.SAVED_ONLY_WHEN_SET or name in float_ranges(space):
        return False
    lever = LEVERS[name]
    default = lever.choice(SharpConfig.model_fields[name].default)
    return list(getattr(space, name)) == [default]


def apply_params(base: SharpConfig, params: Mapping[str, Any]) -> SharpConfig:
    """The program config a parameter point stands for."""
    values = base.model_dump()
    for name, value in params.items():
        if name not in LEVERS:
            raise ConfigError(f"unknown policy parameter {name!r}; valid: {', '.join(TUNED_FIELDS)}")
        values[name] = LEVERS[name].setting(value)
    return SharpConfig.from_mapping(values)


def params_of(config: SharpConfig) -> dict[str, Any]:
    """The search-space point that stands for ``config`` (a form without its own accept threshold: the
    general one)."""
    out = {name: lever.choice(getattr(config, name)) for name, lever in LEVERS.items()}
    out.update(accept_comparison=config.accept_for("comparison"), accept_yesno=config.accept_for("yesno"))
    return out


def in_space(params: Mapping[str, Any], space: SearchSpace) -> bool:
    """Whether every free parameter of ``params`` is a value the space can suggest."""
    ranges = float_ranges(space)
    for name, value in params.items():
        if name in space.fixed or _unsearched(name, space):
            continue
        if name in ranges:
            lo, hi = ranges[name]
            if not lo <= float(value) <= hi:
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
    point = {k: v for k, v in params.items() if k not in space.fixed and not _unsearched(k, space)}
    study.enqueue_trial(point, user_attrs={"baseline": True})
    return True


def enqueue_every_repair(study: Any, space: SearchSpace) -> bool:
    """Queue, on a study no trial has run yet, the corner where every draft is repaired: the accept thresholds
    at the top of their range, the most repairs, each form's first repair order. A repair pays only above a
    threshold most drafts' uncalibrated P(right) lies below (the 1.5B reader is sure of its wrong answers), a
    needle the sampler's first random trials rarely find; from here it is a neighbour. False when the study
    has run trials or queued this corner already."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state != TrialState.WAITING or t.user_attrs.get("corner") for t in trials):
        return False
    point: dict[str, Any] = {}
    for name in ("accept_threshold", "accept_comparison", "accept_yesno"):
        point[name] = space.threshold_high
    point["max_repairs"] = max(space.max_repairs)
    for name in ORDERS:
        point[name] = next((c for c in getattr(space, name) if c != "none"), "none")
    point = {k: v for k, v in point.items() if k not in space.fixed}
    study.enqueue_trial(point, user_attrs={"corner": "every repair"})
    return True


def baseline_trial(study: Any) -> Any | None:
    """The finished trial queued by :func:`enqueue_baseline`, if any."""
    return next(
        (t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.user_attrs.get("baseline")),
        None,
    )


# ---- objectives ----------------------------------------------------------------------------------
FORM_EM = "em.form."  # the metric key prefix of a question form's EM (ReplayScorer: em.form.comparison)
FLOOR_PENALTY = "1 + shortfall"  # what CallCost charges a form below its floor (a build's steps stamp it)


class CallCost(StrictConfig):
    """What the ``em-cost`` objective charges a policy for its LM calls (`sharp tune --cost-weight
    --max-calls`): ``weight`` EM points for each call a question beyond the one a single pass makes, and a
    penalty of 1 when the calls a question exceed ``max_calls`` on average (None: no cap).

    ``floors`` (question form -> EM; `sharp build --form-floors`) charges a policy under which a form scores below
    its floor on the questions scored the same penalty of 1, plus the EM it falls short by (summed over the forms
    below): a search that may not buy one form's gain with another's loss, and where no policy of the space keeps
    every floor, takes the one nearest to them. A form without questions there loses nothing."""

    weight: float = Field(0.02, ge=0.0)
    max_calls: float | None = Field(2.0, ge=1.0)  # every question spends one call on its draft
    floors: dict[str, float] = {}

    @model_validator(mode="after")
    def _check_floors(self) -> CallCost:
        bad = {form: em for form, em in self.floors.items() if not 0.0 <= em <= 1.0}
        if bad:
            raise ValueError(f"floors: a form's floor is an EM in [0, 1], not {bad}")
        return self

    def record(self) -> dict[str, Any]:
        """What a study keeps of this call cost (floors only where there are some: a study recorded before floors
        existed resumes with the same cost)."""
        out = self.model_dump()
        if not out["floors"]:
            del out["floors"]
        return out

    def shortfalls(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """The forms whose EM in ``metrics`` lies below their floor, and by how much."""
        out = {}
        for form, floor in sorted(self.floors.items()):
            em = metrics.get(FORM_EM + form)
            if em is not None and float(em) < floor - 1e-9:
                out[form] = floor - float(em)
        return out

    def below_floor(self, metrics: Mapping[str, Any]) -> list[str]:
        """The forms whose EM in ``metrics`` lies below their floor."""
        return list(self.shortfalls(metrics))

    def em_cost(self, metrics: Mapping[str, Any]) -> float:
        """EM less what the calls cost, a penalty of 1 over the cap, and 1 plus the shortfall under a form's floor."""
        calls = float(metrics.get("lm_calls_per_q") or 0.0)
        over = self.max_calls is not None and calls > self.max_calls
        short = self.shortfalls(metrics)
        penalty = (1.0 if over else 0.0) + ((1.0 + sum(short.values())) if short else 0.0)
        return float(metrics.get("em") or 0.0) - self.weight * max(0.0, calls - 1.0) - penalty


@dataclass(frozen=True)
class Objective:
    name: str
    directions: tuple[str, ...]
    keys: tuple[str, ...]
    cost: CallCost | None = None  # em-cost: what an LM call costs (the objective's own key, ``em_cost``)

    def scored(self, metrics: Mapping[str, Any]) -> dict:
        """A policy's metrics with what this objective derives from them (em-cost: ``em_cost``)."""
        return {**metrics, "em_cost": self.cost.em_cost(metrics)} if self.cost is not None else dict(metrics)

    def values(self, metrics: Mapping[str, Any]) -> float | tuple[float, ...]:
        vals = tuple(float(metrics[k] or 0.0) for k in self.keys)
        return vals[0] if len(vals) == 1 else vals

    @property
    def multi(self) -> bool:
        return len(self.directions) > 1


OBJECTIVES: dict[str, Objective] = {
    "f1": Objective("f1", ("maximize",), ("f1",)),
    "em": Objective("em", ("maximize",), ("em",)),
    "em-cost": Objective("em-cost", ("maximize",), ("em_cost",), CallCost()),
    "f1-cost": Objective("f1-cost", ("maximize", "minimize"), ("f1", "lm_calls_per_q")),
}


def get_objective(name: str, cost: CallCost | None = None) -> Objective:
    """The objective ``name``; ``cost`` replaces em-cost's default call cost, and is refused by an objective
    that prices no call."""
    if name not in OBJECTIVES:
        raise ConfigError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}")
    objective = OBJECTIVES[name]
    if cost is None:
        return objective
    if objective.cost is None:
        raise ConfigError(
            f"the {name} objective prices no LM call, so --cost-weight and --max-calls would change nothing: "
            f"leave them out, or choose --objective em-cost"
        )
    return replace(objective, cost=cost)


# ---- studies -------------------------------------------------------------------------------------
class TrialSeededSampler(BaseSampler):
    """TPE whose random draws depend only on (seed, trial number), whichever worker runs the trial.

    Two workers started with the same ``--seed`` would otherwise draw the same points one after the
    other (duplicate trials); here trial 7 gets the draws of trial 7 in any process, so parallel
    workers never repeat each other's random points. ``constant_liar`` makes TPE avoid the points of
    trials still running in other workers.
    """

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._current = self._make(self.seed)

    @staticmethod
    def _make(seed: int) -> TPESampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return TPESampler(seed=seed, constant_liar=True)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._current = self._make((self.seed * 1_000_003 + trial.number) % 2**32)
        self._current.before_trial(study, trial)

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict:
        return self._current.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict) -> dict:
        return self._current.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        return self._current.sample_independent(study, trial, name, distribution)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._current.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._current.reseed_rng()


def _retry_callback() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RetryHeartbeatStaleTrialCallback(max_retry=1)


def open_study(storage: str, name: str, objective: Objective, seed: int = 0, heartbeat_s: int = 60) -> Any:
    """Create or resume study ``name`` in ``storage`` (an Optuna RDB URL or ``journal:PATH``).

    Trials left RUNNING by a dead worker are failed and queued again (same parameters, once): on
    this host at once (the worker's process is gone), elsewhere after a missed heartbeat (RDB only).
    """
    store = open_storage(storage, heartbeat_s, _retry_callback())
    sampler = TrialSeededSampler(seed)
    try:
        study = optuna.create_study(
            storage=store,
            study_name=name,
            load_if_exists=True,
            directions=list(objective.directions),
            sampler=sampler,
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
    _check_call_cost(study, objective)
    reap_dead_trials(study)
    return study


COST_ATTR = "call_cost"


def _check_call_cost(study: Any, objective: Objective) -> None:
    """A study keeps the call cost its trials were scored with: resuming it with another is refused (its
    trials' values would mix two objectives). A study from before this record takes the one given now."""
    mine = objective.cost.record() if objective.cost is not None else None
    if COST_ATTR not in study.user_attrs:
        if mine is not None and study.get_trials(deepcopy=False):
            log.warning("study %s does not record the call cost of its trials; taken as %s", study.study_name, mine)
        study.set_user_attr(COST_ATTR, mine)
        return
    stored = study.user_attrs[COST_ATTR]
    if stored != mine:
        raise ConfigError(
            f"study {study.study_name!r} scored its trials with the call cost {stored}, not {mine} (--cost-weight, "
            f"--max-calls); give the same, or choose another --study name"
        )


def finished_trials(study: Any) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


WORKER_ATTR = "worker"


def reap_dead_trials(study: Any) -> list[int]:
    """Fail the trials left RUNNING by a worker process of this host that is gone, and queue each
    again once (its parameters, a ``failed_trial`` system attribute). Returns the failed numbers."""
    reaped = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get(WORKER_ATTR) or {}
        if worker.get("trial") != t.number or not is_gone(worker):
            continue
        try:
            study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:  # another worker got there first
            continue
        log.warning(
            "trial %d was left running by process %s on %s, which is gone: failed, queued again",
            t.number,
            worker.get("pid"),
            worker.get("host"),
        )
        reaped.append(t.number)
        _retry_callback()(study, study._storage.get_trial(t._trial_id))
    return reaped


class SkippedTrial(Exception):
    """A trial a worker reserved but must not run (the study has its trials, or it repeats the baseline)."""


@dataclass
class TrialOutcome:
    params: dict
    metrics: dict
    seconds: float
    recorded: bool


@dataclass
class Tuner:
    """An Optuna objective: parameters -> (recording, replay) -> objective values.

    ``score(params)`` returns ``(metrics, recorded)``: the metrics of the policy (a :class:`ReplayScorer`'s) and
    whether a new live recording was needed; the objective adds what it derives (``em_cost``). Each trial's
    metrics and timing go to the trial's user attributes.

    With ``n_trials`` set (run_study does), a trial first checks that it is needed: trials are
    numbered in the order workers reserve them, so trial ``i`` runs only while the finished trials
    plus the running ones numbered below ``i`` are fewer than ``n_trials``; several workers on one
    storage then finish exactly ``n_trials``. A second copy of the queued baseline (two workers
    opening a new study at once) is skipped too. A skipped trial ends FAIL (Optuna cannot delete a
    trial), marked ``skipped`` and without parameters.
    """

    space: SearchSpace
    objective: Objective
    score: Callable[[dict], tuple[dict, bool]]
    outcomes: list[TrialOutcome] = field(default_factory=list)
    n_trials: int | None = None

    def _check_turn(self, trial: Any) -> None:
        others = [t for t in trial.study.get_trials(deepcopy=False) if t.number != trial.number]
        frozen = trial.study._storage.get_trial(trial._trial_id)
        if frozen.user_attrs.get("baseline") and "failed_trial" not in frozen.system_attrs:
            first = next(
                (
                    t
                    for t in others
                    if t.number < trial.number and t.user_attrs.get("baseline") and "failed_trial" not in t.system_attrs
                ),
                None,
            )
            if first is not None:
                self._skip(trial, f"a copy of the baseline trial {first.number}")
        if self.n_trials is None:
            return
        done = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in others)
        ahead = sum(t.state == TrialState.RUNNING and t.number < trial.number for t in others)
        if done + ahead >= self.n_trials:  # (run_study's callback then stops this worker)
            self._skip(trial, f"not needed: {done} finished and {ahead} running of {self.n_trials}")

    @staticmethod
    def _skip(trial: Any, why: str) -> None:
        trial.set_user_attr("skipped", why)
        raise SkippedTrial(f"trial {trial.number} skipped: {why}")

    def __call__(self, trial: Any) -> float | tuple[float, ...]:
        trial.set_user_attr(WORKER_ATTR, {**identity(), "trial": trial.number})
        self._check_turn(trial)
        params = suggest(trial, self.space)
        t0 = time.perf_counter()
        metrics, recorded = self.score(params)
        metrics = self.objective.scored(metrics)
        seconds = time.perf_counter() - t0
        trial.set_user_attr("metrics", {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        trial.set_user_attr("params", params)
        trial.set_user_attr("seconds", seconds)
        trial.set_user_attr("recorded", recorded)
        self.outcomes.append(TrialOutcome(params, metrics, seconds, recorded))
        return self.objective.values(metrics)


def _stop_when_full(n_trials: int) -> Callable[[Any, Any], None]:
    """After each trial: stop once finished trials plus those other workers are running reach ``n_trials``."""

    def callback(study: Any, trial: Any) -> None:
        reap_dead_trials(study)
        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        if len(study.get_trials(deepcopy=False, states=states)) >= n_trials:
            study.stop()

    return callback


def run_study(study: Any, tuner: Tuner, n_trials: int, callbacks: list | None = None) -> int:
    """Run trials until the study has ``n_trials`` finished ones, counting every worker's (other
    processes may share the storage); return how many this process finished."""
    tuner.n_trials = n_trials
    before = len(tuner.outcomes)
    while True:
        reap_dead_trials(study)
        remaining = n_trials - finished_trials(study)
        if remaining <= 0:
            break
        mark = len(tuner.outcomes)
        study.optimize(
            tuner, n_trials=remaining, callbacks=[*(callbacks or []), _stop_when_full(n_trials)], catch=(SkippedTrial,)
        )
        if len(tuner.outcomes) == mark:  # every trial it reserved was skipped: the others finish the study
            break
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


# ---- scoring a policy by replay ----------------------------------------------------------------------------
class ReplayScorer:
    """Parameters -> metrics: one live recording of the base program (kept on disk, resumable), replayed
    per policy. With ``needs_critic`` the recording critiques every round."""

    def __init__(
        self,
        base: SharpRAG,
        examples: Sequence[Any],
        record_path: Path,
        threads: int = 1,
        needs_critic: bool = True,
        passages: Any = None,
        actions: Sequence[str] | None = None,
        focus_when: str = "rejected",
    ):
        if not isinstance(base, SharpRAG):
            raise ConfigError(
                f"tuning replays SHARP's repair loop; {type(base).__name__} has none (use --system sharp)"
            )
        self.base, self.examples, self.record_path, self.threads = base, list(examples), record_path, threads
        self.needs_critic = needs_critic
        self.passages = passages or titles_only  # recorded passages -> their text (rules that read it)
        self.actions = None if actions is None else tuple(actions)  # the repairs to record (None: every one)
        self.focus_when = focus_when  # focused reads to record: after every rejected draft, or flagged ones
        self.recording: dict[str, dict] | None = None
        self.record_seconds = self.replay_seconds = self.live_estimate = 0.0
        self.recordings_made = 0

    def program_for(self, params: dict) -> SharpRAG:
        with shared_retriever(self.base):
            program = self.base.deepcopy()
        program.retriever = self.base.retriever
        program.config = apply_params(self.base.config, params)
        return program

    def records(self) -> dict[str, dict]:
        if self.recording is None:
            t0 = time.perf_counter()
            live = bool(recording.pending(self.examples, self.record_path, self.base, self.actions, self.focus_when))
            recs = recording.record(
                self.base,
                self.examples,
                self.record_path,
                self.threads,
                critique=self.needs_critic,
                passages=self.passages,
                actions=self.actions,
                focus_when=self.focus_when,
            )
            recording.check_reading(recs.values(), self.base)
            if self.needs_critic and not all(r.get("critiqued", True) for r in recs.values() if not r.get("error")):
                raise ConfigError(
                    f"{self.record_path} holds rounds the critic did not read, and the search space asks the "
                    "critic: record again with the critic, or fix ask_critic=off in the space"
                )
            self.record_seconds += time.perf_counter() - t0
            self.recordings_made += int(live)
            self.recording = recs
        return self.recording

    def __call__(self, params: dict) -> tuple[dict, bool]:
        recorded = self.recording is None
        recs = self.records()
        t0 = time.perf_counter()
        policy = apply_params(self.base.config, params)
        result = replay.score(recs, self.examples, policy, passages=self.passages, intervals=False)
        seconds = time.perf_counter() - t0
        self.replay_seconds += seconds
        live = result.metrics["live_seconds_per_q"] * len(self.examples)
        self.live_estimate += live
        metrics = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        metrics.update(form_em(result.rows, recs), replay_seconds=seconds, live_seconds_estimate=live)
        return metrics, recorded

    def speedup(self) -> dict:
        spent = self.record_seconds + self.replay_seconds
        return {
            "recordings": self.recordings_made,
            "record_seconds": round(self.record_seconds, 3),
            "replay_seconds": round(self.replay_seconds, 4),
            "live_seconds_estimate": round(self.live_estimate, 3),
            "speedup_total": self.live_estimate / spent if spent > 0 else None,
            "speedup_replay_only": self.live_estimate / self.replay_seconds if self.replay_seconds > 0 else None,
        }


def form_em(rows: Sequence[dict], records: Mapping[str, dict]) -> dict[str, float]:
    """Each question form's EM over ``rows`` (the form the program gave the question when it was recorded), as
    metrics: ``em.form.bridge``, ``em.form.comparison``, ``em.form.yesno``."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        form = (records.get(row["id"]) or {}).get("form")
        if form:
            groups.setdefault(form, []).append(float(row["em"]))
    return {FORM_EM + form: sum(ems) / len(ems) for form, ems in sorted(groups.items())}
