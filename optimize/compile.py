"""DSPy optimizers by name, with small-data defaults, and one accounted compile entry point.

``OPTIMIZERS`` maps a CLI name to an :class:`OptimizerSpec`: how to build the teleprompter, the
smallest train split it can work with, and whether it needs a proposer LM or a feedback metric.
Settings given by the user override the defaults; an unknown setting is a ConfigError that lists
the valid ones. :func:`compile_program` runs one compile inside a cost ledger and returns the
compiled module, the settings used and the cost (LM calls, tokens, seconds).

Every optimizer runs single-threaded by default: DSPy's worker threads do not inherit the cost
ledger (a context variable), and the local model serves one call at a time anyway.
"""

from __future__ import annotations

import copy
import inspect
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from program.errors import ConfigError
from program.lm.accounting import recording

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    cls: type
    defaults: Callable[[OptimizerContext], dict]
    min_train: int
    description: str
    needs_proposer: bool = False
    uses_valset: bool = True
    single_lm: bool = False  # runs every predictor on one LM (it samples that LM at several temperatures)
    feedback: bool = False  # its metric must return dspy.Prediction(score=..., feedback=...)
    batch_key: str | None = None  # a setting that must not exceed the train split
    budget_keys: tuple[str, ...] = ()
    compile_kwargs: dict = field(default_factory=dict)
    compile_keys: tuple[str, ...] = ()  # settings that go to .compile(), not the constructor
    # settings that together replace the "auto" preset: giving any turns auto off and needs them all
    explicit_budget: tuple[str, ...] = ()


def _bootstrap(ctx: OptimizerContext) -> dict:
    return {
        "metric": ctx.metric,
        "metric_threshold": ctx.metric_threshold,
        "max_bootstrapped_demos": 2,
        "max_labeled_demos": 2,
        "max_rounds": 1,
    }


def _bootstrap_rs(ctx: OptimizerContext) -> dict:
    return {**_bootstrap(ctx), "num_candidate_programs": 4, "num_threads": 1}


def _mipro(ctx: OptimizerContext) -> dict:
    return {
        "metric": ctx.metric,
        "metric_threshold": ctx.metric_threshold,
        "prompt_model": ctx.proposer_lm,
        "task_model": ctx.task_lm,
        "auto": "light",
        "max_bootstrapped_demos": 2,
        "max_labeled_demos": 2,
        "num_threads": 1,
        "seed": ctx.seed,
        "verbose": False,
    }


def _simba(ctx: OptimizerContext) -> dict:
    return {
        "metric": ctx.metric,
        "prompt_model": ctx.proposer_lm,
        "bsize": min(8, max(ctx.n_train, 1)),
        "num_candidates": 4,
        "max_steps": 4,
        "max_demos": 2,
        "num_threads": 1,
    }


def _gepa(ctx: OptimizerContext) -> dict:
    return {
        "metric": ctx.feedback_metric,
        "reflection_lm": ctx.proposer_lm,
        "max_full_evals": 3,
        "reflection_minibatch_size": 3,
        "num_threads": 1,
        "seed": ctx.seed,
        "track_stats": False,
    }


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

OPTIMIZERS: dict[str, OptimizerSpec] = {
    s.name: s
    for s in (
        OptimizerSpec(
            "bootstrap",
            dspy.BootstrapFewShot,
            _bootstrap,
            2,
            "few-shot demos bootstrapped from the program's own successful traces",
            uses_valset=False,
        ),
        OptimizerSpec(
            "bootstrap-rs",
            dspy.BootstrapFewShotWithRandomSearch,
            _bootstrap_rs,
            4,
            "bootstrapped demo sets, the best of several kept by validation score",
        ),
        OptimizerSpec(
            "mipro",
            dspy.MIPROv2,
            _mipro,
            8,
            "instructions proposed by the proposer LM plus demos, searched with Bayesian optimization",
            needs_proposer=True,
            compile_kwargs={"requires_permission_to_run": False},
            compile_keys=MIPRO_COMPILE_KEYS,
            explicit_budget=("num_candidates", "num_trials"),
        ),
        OptimizerSpec(
            "simba",
            dspy.SIMBA,
            _simba,
            4,
            "stochastic mini-batch ascent: self-reflective rules and demos on hard examples",
            needs_proposer=True,
            uses_valset=False,
            single_lm=True,
            batch_key="bsize",
        ),
        OptimizerSpec(
            "gepa",
            dspy.GEPA,
            _gepa,
            3,
            "reflective instruction evolution from textual feedback (Pareto-based)",
            needs_proposer=True,
            feedback=True,
            budget_keys=("auto", "max_full_evals", "max_metric_calls"),
        ),
    )
}


def optimizer_names() -> list[str]:
    return list(OPTIMIZERS)


def get_spec(name: str) -> OptimizerSpec:
    if name not in OPTIMIZERS:
        raise UnknownOptimizerError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def check_sizes(name: str, n_train: int, n_val: int = 0) -> None:
    """Refuse a train split too small for ``name`` (and an empty validation split where it is used)."""
    spec = get_spec(name)
    if n_train < spec.min_train:
        raise TrainSetTooSmallError(
            f"optimizer {name!r} needs at least {spec.min_train} training examples, got {n_train}; "
            f"raise --n-train (or use 'bootstrap', which needs {OPTIMIZERS['bootstrap'].min_train})"
        )
    if spec.uses_valset and n_val < 1:
        raise TrainSetTooSmallError(
            f"optimizer {name!r} scores candidates on a validation split; give it at least 1 example (--n-val)"
        )


def build_optimizer(name: str, ctx: OptimizerContext, overrides: dict | None = None) -> tuple[Any, dict]:
    """The teleprompter and the settings it was built with (JSON-ready, without callables)."""
    spec = get_spec(name)
    if spec.needs_proposer and ctx.proposer_lm is None:
        raise ConfigError(f"optimizer {name!r} proposes instructions and needs a proposer LM (--proposer-lm)")
    if spec.feedback and ctx.feedback_metric is None:
        raise ConfigError(f"optimizer {name!r} needs a feedback metric (score + feedback text)")
    overrides = dict(overrides or {})
    kwargs = spec.defaults(ctx)
    if spec.budget_keys and set(overrides) & set(spec.budget_keys):
        given = [k for k in spec.budget_keys if overrides.get(k) is not None]
        if len(given) != 1:
            raise ConfigError(
                f"optimizer {name!r} takes exactly one budget of {', '.join(spec.budget_keys)}; "
                f"got {', '.join(given) or 'none'}"
            )
        for key in spec.budget_keys:
            kwargs.pop(key, None)
    accepted = set(inspect.signature(spec.cls.__init__).parameters) - {"self"}
    unknown = sorted(set(overrides) - accepted - set(spec.compile_keys))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)} for optimizer {name!r}; "
            f"valid settings: {', '.join(sorted((accepted | set(spec.compile_keys)) - {'metric'}))}"
        )
    at_compile = {k: v for k, v in overrides.items() if k in spec.compile_keys}
    kwargs.update({k: v for k, v in overrides.items() if k not in spec.compile_keys})
    if spec.explicit_budget:
        if set(spec.explicit_budget) & set(overrides) and "auto" not in overrides:
            kwargs["auto"] = None  # an explicit budget replaces the auto preset
        if kwargs.get("auto") is None and not all({**kwargs, **at_compile}.get(k) for k in spec.explicit_budget):
            raise ConfigError(
                f"{name} without an auto preset needs both {' and '.join(spec.explicit_budget)} "
                "(" + " ".join(f"--opt {k}=N" for k in spec.explicit_budget) + ")"
            )
    if spec.batch_key and kwargs[spec.batch_key] > ctx.n_train:
        raise TrainSetTooSmallError(
            f"{name}'s {spec.batch_key} ({kwargs[spec.batch_key]}) exceeds the train split "
            f"({ctx.n_train}); lower it (--opt {spec.batch_key}=N) or raise --n-train"
        )
    try:
        optimizer = spec.cls(**kwargs)
    except (AssertionError, TypeError, ValueError) as exc:
        raise ConfigError(f"cannot build optimizer {name!r}: {exc}") from None
    return optimizer, loggable_settings({**kwargs, **at_compile})


def compile_settings(name: str, overrides: dict | None = None) -> dict:
    """The settings of ``overrides`` that ``name``'s .compile() takes."""
    spec = get_spec(name)
    return {k: v for k, v in (overrides or {}).items() if k in spec.compile_keys}


def loggable_settings(kwargs: dict) -> dict:
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


class Shared:
    """Wraps an object so that copies of a module share it: ``deepcopy`` returns the same wrapper.

    Optimizers deep-copy the student many times; a retriever holds an index and an embedding
    model, which must be shared, not copied. Attribute access goes to the wrapped object.
    """

    def __init__(self, obj: Any):
        self.obj = obj

    def __deepcopy__(self, memo: dict) -> Shared:
        return self

    def __getattr__(self, name: str) -> Any:
        if name == "obj":
            raise AttributeError(name)
        return getattr(self.obj, name)


@contextmanager
def shared_retriever(module: dspy.Module) -> Iterator[dspy.Module]:
    """Within the block, copies of ``module`` share its retriever; restored afterwards."""
    retriever = getattr(module, "retriever", None)
    if retriever is None or isinstance(retriever, Shared):
        yield module
        return
    module.retriever = Shared(retriever)
    try:
        yield module
    finally:
        module.retriever = retriever


def unshare(module: dspy.Module) -> dspy.Module:
    if isinstance(getattr(module, "retriever", None), Shared):
        module.retriever = module.retriever.obj
    return module


def signature_key(signature: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A predictor's role fingerprint: its input and output field names (reasoning aside), which
    survive the copies, resets and instruction rewrites optimizers make."""
    outputs = tuple(sorted(set(signature.output_fields) - {"reasoning"}))
    return tuple(sorted(signature.input_fields)), outputs


class RoleLMs(BaseCallback):
    """Gives each predictor copy the LM of its role when it runs without one.

    Optimizers reset their copies of the student (``reset_copy`` clears ``lm``), which would send
    every role to one global LM. This callback maps a predictor back to its role by signature and
    sets that role's LM, so planner, critic and generator keep their own models while compiling.
    """

    def __init__(self, module: dspy.Module):
        self.by_key: dict[tuple, Any] = {}
        for _, pred in module.named_predictors():
            if pred.lm is not None:
                key = signature_key(pred.signature)
                if key in self.by_key and self.by_key[key] is not pred.lm:
                    log.warning("two predictors share a signature but not an LM; the first one's LM is used")
                    continue
                self.by_key[key] = pred.lm

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        if isinstance(instance, dspy.Predict) and instance.lm is None:
            lm = self.by_key.get(signature_key(instance.signature))
            if lm is not None:
                instance.lm = lm


@dataclass
class CompileResult:
    program: dspy.Module
    optimizer: str
    settings: dict
    cost: dict
    seconds: float


def compile_program(
    student: dspy.Module,
    optimizer: str,
    trainset: Sequence[Any],
    valset: Sequence[Any] = (),
    *,
    metric: Callable[..., Any],
    feedback_metric: Callable[..., Any] | None = None,
    proposer_lm: Any = None,
    task_lm: Any = None,
    overrides: dict | None = None,
    metric_threshold: float | None = None,
    seed: int = 0,
    freeze: Sequence[str] = (),
) -> CompileResult:
    """Compile every predictor of ``student`` with ``optimizer``; account every LM call it makes.

    ``task_lm`` is the LM DSPy sees as the global default while compiling (optimizers that need a
    task model read it there); each predictor keeps the LM of its role. Predictors of the roles in
    ``freeze`` (e.g. a critic compiled on its own) come out with the student's demos and
    instructions: an answer metric cannot tell a good critique from a bad one, so a whole-program
    optimizer would otherwise replace a compiled critic's demos with whatever its traces said.
    """
    trainset, valset = list(trainset), list(valset)
    frozen = frozen_states(student, freeze)
    check_sizes(optimizer, len(trainset), len(valset))
    spec = get_spec(optimizer)
    ctx = OptimizerContext(
        metric=metric,
        feedback_metric=feedback_metric,
        proposer_lm=proposer_lm,
        task_lm=task_lm,
        n_train=len(trainset),
        seed=seed,
        metric_threshold=metric_threshold,
    )
    teleprompter, used = build_optimizer(optimizer, ctx, overrides)
    kwargs: dict[str, Any] = {"trainset": trainset, **spec.compile_kwargs, **compile_settings(optimizer, overrides)}
    if spec.uses_valset and valset:
        kwargs["valset"] = valset
    log.info("compiling with %s on %d train / %d val examples", optimizer, len(trainset), len(valset))
    lms = {name: pred.lm for name, pred in student.named_predictors()}
    callbacks = list(dspy.settings.get("callbacks") or [])
    with shared_retriever(student):
        student = student.deepcopy()
    student._compiled = False  # a loaded or earlier-compiled program is compiled again from its state
    if spec.single_lm:
        task_lm = _one_lm(optimizer, list(lms.values()), task_lm)
        for _, pred in student.named_predictors():
            pred.lm = None
    else:
        callbacks.append(RoleLMs(student))
    t0 = time.perf_counter()
    try:
        dspy_settings = {"num_threads": 1, "callbacks": callbacks, **({"lm": task_lm} if task_lm is not None else {})}
        with recording() as ledger, dspy.context(**dspy_settings):
            compiled = teleprompter.compile(student, **kwargs)
    finally:
        unshare(student)
    compiled = unshare(compiled)
    for name, pred in compiled.named_predictors():  # optimizers' copies lost or changed LMs: restore
        if name in frozen:
            pred.load_state(frozen[name])
        if name in lms:
            pred.lm = lms[name]
    seconds = time.perf_counter() - t0
    cost = ledger.summary()
    cost["seconds"] = round(seconds, 3)
    return CompileResult(program=compiled, optimizer=optimizer, settings=used, cost=cost, seconds=seconds)


def frozen_states(module: dspy.Module, roles: Sequence[str]) -> dict[str, dict]:
    """The saved state of every predictor of ``module`` whose role (first name part) is in ``roles``."""
    roles = list(dict.fromkeys(roles or ()))
    named = dict(module.named_predictors())
    known = sorted({name.split(".")[0] for name in named})
    unknown = [r for r in roles if r not in known]
    if unknown:
        raise ConfigError(
            f"cannot freeze {', '.join(map(repr, unknown))}: this program's predictors are {', '.join(known)}"
        )
    return {
        name: {**copy.deepcopy(pred.dump_state()), "lm": None}  # the role's LM is restored separately
        for name, pred in named.items()
        if name.split(".")[0] in roles
    }


def _one_lm(optimizer: str, lms: list[Any], task_lm: Any) -> Any:
    def identity(lm: Any) -> str:
        spec = getattr(lm, "spec", None)
        return repr(spec.model_dump() if spec is not None else getattr(lm, "model", id(lm)))

    distinct = {identity(lm) for lm in lms if lm is not None}
    if len(distinct) > 1:
        raise ConfigError(
            f"optimizer {optimizer!r} runs every predictor on one LM, but the roles use "
            f"{len(distinct)} different LMs; give every role the same --lm, or choose another optimizer"
        )
    return task_lm if task_lm is not None else next((lm for lm in lms if lm is not None), None)


def describe_program(module: dspy.Module) -> dict[str, dict]:
    """Per predictor: its instructions and demos (JSON-ready), for humans and artifacts."""
    out = {}
    for name, pred in module.named_predictors():
        out[name] = {
            "instructions": pred.signature.instructions,
            "fields": list(pred.signature.fields),
            "demos": [_plain(d) for d in pred.demos],
        }
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "toDict"):
        return _plain(value.toDict())
    return str(value)


def render_prompts(description: dict[str, dict]) -> str:
    """Markdown of :func:`describe_program`: one section per predictor."""
    lines = ["# Compiled prompts", ""]
    for name, info in description.items():
        lines += [
            f"## {name}",
            "",
            "### Instructions",
            "",
            info["instructions"].strip(),
            "",
            f"### Demos ({len(info['demos'])})",
            "",
        ]
        for i, demo in enumerate(info["demos"], 1):
            lines.append(f"**Demo {i}**{' (bootstrapped)' if demo.get('augmented') else ''}")
            lines.append("")
            for key, value in demo.items():
                if key == "augmented":
                    continue
                text = value if isinstance(value, str) else repr(value)
                lines.append(f"- `{key}`: {text[:1500]}")
            lines.append("")
    return "\n".join(lines)
