"""DSPy optimizers by name: a table of factory functions with small-data defaults.

``OPTIMIZERS`` maps a CLI name (``sharp compile --optimizer NAME``) to an :class:`Optimizer`: its
factory, the smallest train split it can work with, and the three facts the compile loop needs
(proposer LM, validation split, one LM for every role). A factory takes an :class:`OptimizerContext`
and the user's settings (``--opt key=value``), which override its defaults, and returns a
:class:`Built`: the teleprompter, the settings it was built with (for logging) and what its
``.compile()`` takes besides the train and validation sets. An unknown setting is a ConfigError that
lists the valid ones.

Every optimizer runs single-threaded by default: DSPy's worker threads do not inherit the cost
ledger (a context variable), and the local model serves one call at a time anyway.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from program.errors import ConfigError


class UnknownOptimizerError(ConfigError):
    """An optimizer name that is not registered."""


class TrainSetTooSmallError(ConfigError):
    """The train (or validation) split is too small for the chosen optimizer."""


@dataclass
class OptimizerContext:
    """What a factory may use to build its optimizer."""

    metric: Callable[..., Any]
    feedback_metric: Callable[..., Any] | None = None
    proposer_lm: Any = None
    task_lm: Any = None
    n_train: int = 0
    seed: int = 0
    metric_threshold: float | None = None
    frozen: tuple[str, ...] = ()  # roles whose predictors the optimizer must leave as they are


@dataclass
class Built:
    """A teleprompter, the settings it was built with (JSON-ready) and its extra ``.compile()`` arguments."""

    optimizer: Any
    settings: dict
    compile_kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Optimizer:
    factory: Callable[[OptimizerContext, dict], Built]
    min_train: int
    description: str
    needs_proposer: bool = False  # proposes instructions with the proposer LM
    uses_valset: bool = True  # scores its candidates on a validation split
    single_lm: bool = False  # runs every predictor on one LM (it samples that LM at several temperatures)


# ---- building blocks of the factories -----------------------------------------------------------------
def _merge(name: str, cls: type, defaults: dict, opts: Mapping[str, Any], compile_keys: Collection[str] = ()) -> dict:
    """``defaults`` updated by the user's settings, each of which ``cls`` (or its .compile()) must take."""
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(opts) - accepted - set(compile_keys))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)} for optimizer {name!r}; "
            f"valid settings: {', '.join(sorted((accepted | set(compile_keys)) - {'metric'}))}"
        )
    return {**defaults, **opts}


def _build(name: str, cls: type, kwargs: dict, at_compile: Mapping[str, Any] | None = None) -> Built:
    at_compile = dict(at_compile or {})
    try:
        optimizer = cls(**kwargs)
    except (AssertionError, TypeError, ValueError) as exc:
        raise ConfigError(f"cannot build optimizer {name!r}: {exc}") from None
    return Built(optimizer, loggable_settings({**kwargs, **at_compile}), at_compile)


def loggable_settings(kwargs: Mapping[str, Any]) -> dict:
    """The settings worth logging: callables become names, LMs their model string."""
    out = {}
    for key, value in kwargs.items():
        if isinstance(value, dspy.BaseLM):
            out[key] = getattr(value, "model", type(value).__name__)
        elif callable(value):
            out[key] = getattr(value, "__name__", type(value).__name__)
        else:
            out[key] = value
    return out


def _demo_defaults(ctx: OptimizerContext) -> dict:
    return {
        "metric": ctx.metric,
        "metric_threshold": ctx.metric_threshold,
        "max_bootstrapped_demos": 2,
        "max_labeled_demos": 2,
    }


# ---- the factories ------------------------------------------------------------------------------------
def labeled(ctx: OptimizerContext, opts: dict) -> Built:
    """k labeled train examples as demos (seeded draw), no LM call: what a gold decomposition gives a planner."""
    cls = dspy.LabeledFewShot
    settings = _merge("labeled", cls, {"k": 4}, opts, compile_keys=("sample",))
    at_compile = {"sample": settings.pop("sample", True)}
    return _build("labeled", cls, settings, at_compile)


def bootstrap(ctx: OptimizerContext, opts: dict) -> Built:
    cls = dspy.BootstrapFewShot
    return _build("bootstrap", cls, _merge("bootstrap", cls, {**_demo_defaults(ctx), "max_rounds": 1}, opts))


def bootstrap_rs(ctx: OptimizerContext, opts: dict) -> Built:
    cls = dspy.BootstrapFewShotWithRandomSearch
    defaults = {**_demo_defaults(ctx), "max_rounds": 1, "num_candidate_programs": 4, "num_threads": 1}
    return _build("bootstrap-rs", cls, _merge("bootstrap-rs", cls, defaults, opts))


# MIPROv2 takes its search budget in .compile(): with num_candidates + num_trials set (auto off), a
# small machine can afford a search that auto="light" (dozens of trials) cannot
MIPRO_COMPILE_KEYS = (
    "num_trials",
    "minibatch",
    "minibatch_size",
    "minibatch_full_eval_steps",
    "view_data_batch_size",
    "program_aware_proposer",
    "data_aware_proposer",
    "tip_aware_proposer",
    "fewshot_aware_proposer",
)


def mipro(ctx: OptimizerContext, opts: dict) -> Built:
    defaults = {
        **_demo_defaults(ctx),
        "prompt_model": ctx.proposer_lm,
        "task_model": ctx.task_lm,
        "auto": "light",
        "num_threads": 1,
        "seed": ctx.seed,
        "verbose": False,
    }
    merged = _merge("mipro", dspy.MIPROv2, defaults, opts, MIPRO_COMPILE_KEYS)
    at_compile = {k: merged.pop(k) for k in MIPRO_COMPILE_KEYS if k in merged}
    budget = ("num_candidates", "num_trials")
    if set(budget) & set(opts) and "auto" not in opts:
        merged["auto"] = None  # an explicit budget replaces the auto preset
    if merged["auto"] is None and not all({**merged, **at_compile}.get(k) for k in budget):
        raise ConfigError(
            "mipro without an auto preset needs both num_candidates and num_trials "
            "(--opt num_candidates=N --opt num_trials=N)"
        )
    built = _build("mipro", dspy.MIPROv2, merged, at_compile)
    built.compile_kwargs["requires_permission_to_run"] = False
    return built


def simba(ctx: OptimizerContext, opts: dict) -> Built:
    defaults = {
        "metric": ctx.metric,
        "prompt_model": ctx.proposer_lm,
        "bsize": min(8, max(ctx.n_train, 1)),
        "num_candidates": 4,
        "max_steps": 4,
        "max_demos": 2,
        "num_threads": 1,
    }
    kwargs = _merge("simba", dspy.SIMBA, defaults, opts)
    if kwargs["bsize"] > ctx.n_train:
        raise TrainSetTooSmallError(
            f"simba's bsize ({kwargs['bsize']}) exceeds the train split ({ctx.n_train}); "
            "lower it (--opt bsize=N) or raise --n-train"
        )
    return _build("simba", dspy.SIMBA, kwargs)


GEPA_BUDGETS = ("auto", "max_full_evals", "max_metric_calls")


class ThawedRoundRobin:
    """GEPA's component selector over the predictors it may change: each reflection takes the next one, in
    turn, of those whose role is not frozen (GEPA's own round robin also visits frozen predictors, which
    the program may not even call, and spends the iteration on "no valid reflective examples")."""

    def __init__(self, frozen: Sequence[str]):
        self.frozen = set(frozen)
        self.turn: dict[int, int] = {}

    def __call__(
        self, state: Any, trajectories: Any, subsample_scores: Any, candidate_idx: int, candidate: dict
    ) -> list[str]:
        names = [n for n in candidate if n.split(".")[0] not in self.frozen]
        if not names:
            raise ConfigError("every predictor is frozen: GEPA has nothing to change")
        i = self.turn.get(candidate_idx, 0)
        self.turn[candidate_idx] = i + 1
        return [names[i % len(names)]]


def gepa(ctx: OptimizerContext, opts: dict) -> Built:
    """GEPA reflects on textual feedback: its metric returns ``dspy.Prediction(score=..., feedback=...)``;
    it takes exactly one budget (default ``max_full_evals=3``)."""
    if ctx.feedback_metric is None:
        raise ConfigError("optimizer 'gepa' needs a feedback metric (score + feedback text)")
    defaults = {
        "metric": ctx.feedback_metric,
        "reflection_lm": ctx.proposer_lm,
        "max_full_evals": 3,
        "reflection_minibatch_size": 3,
        "num_threads": 1,
        "seed": ctx.seed,
        "track_stats": True,  # its candidates and their scores: the compile reports what it tried
    }
    if ctx.frozen and "component_selector" not in opts:
        defaults["component_selector"] = ThawedRoundRobin(ctx.frozen)
    if set(opts) & set(GEPA_BUDGETS):
        given = [k for k in GEPA_BUDGETS if opts.get(k) is not None]
        if len(given) != 1:
            raise ConfigError(
                f"optimizer 'gepa' takes exactly one budget of {', '.join(GEPA_BUDGETS)}; got {', '.join(given) or 'none'}"
            )
        defaults = {k: v for k, v in defaults.items() if k not in GEPA_BUDGETS}
    return _build("gepa", dspy.GEPA, _merge("gepa", dspy.GEPA, defaults, opts))


OPTIMIZERS: dict[str, Optimizer] = {
    "labeled": Optimizer(labeled, 1, "k labeled train examples as demos (no LM call)", uses_valset=False),
    "bootstrap": Optimizer(
        bootstrap, 2, "few-shot demos bootstrapped from the program's own successful traces", uses_valset=False
    ),
    "bootstrap-rs": Optimizer(bootstrap_rs, 4, "bootstrapped demo sets, the best of several kept by validation score"),
    "mipro": Optimizer(
        mipro,
        8,
        "instructions proposed by the proposer LM plus demos, searched with Bayesian optimization",
        needs_proposer=True,
    ),
    "simba": Optimizer(
        simba,
        4,
        "stochastic mini-batch ascent: self-reflective rules and demos on hard examples",
        needs_proposer=True,
        uses_valset=False,
        single_lm=True,
    ),
    "gepa": Optimizer(
        gepa, 3, "reflective instruction evolution from textual feedback (Pareto-based)", needs_proposer=True
    ),
}


def get_optimizer(name: str) -> Optimizer:
    if name not in OPTIMIZERS:
        raise UnknownOptimizerError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def check_sizes(name: str, n_train: int, n_val: int = 0) -> None:
    """Refuse a train split too small for ``name`` (and an empty validation split where it is used)."""
    entry = get_optimizer(name)
    if n_train < entry.min_train:
        raise TrainSetTooSmallError(
            f"optimizer {name!r} needs at least {entry.min_train} training examples, got {n_train}; "
            f"raise --n-train (or use 'bootstrap', which needs {OPTIMIZERS['bootstrap'].min_train})"
        )
    if entry.uses_valset and n_val < 1:
        raise TrainSetTooSmallError(
            f"optimizer {name!r} scores candidates on a validation split; give it at least 1 example (--n-val)"
        )


def build_optimizer(name: str, ctx: OptimizerContext, overrides: Mapping[str, Any] | None = None) -> Built:
    """The teleprompter ``name``'s factory builds from ``ctx`` and the user's ``overrides``."""
    entry = get_optimizer(name)
    if entry.needs_proposer and ctx.proposer_lm is None:
        raise ConfigError(f"optimizer {name!r} proposes instructions and needs a proposer LM (--proposer-lm)")
    return entry.factory(ctx, dict(overrides or {}))
