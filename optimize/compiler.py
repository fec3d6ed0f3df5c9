"""One accounted compile: :func:`compile_program` runs an optimizer of :mod:`optimize.optimizers` on a
student inside a cost ledger and returns the compiled module, the settings used and the cost (LM
calls, tokens, seconds). Copies of the student share its retriever; each predictor keeps the LM of
its role; roles may be frozen.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from optimize.optimizers import OptimizerContext, build_optimizer, check_sizes, get_optimizer
from program.errors import ConfigError
from program.lm.accounting import recording

log = logging.getLogger(__name__)


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
    search: dict | None = None  # what a searching optimizer tried (GEPA: :func:`search_summary`)


def _fresh_student(
    student: dspy.Module, optimizer: str, single_lm: bool, task_lm: Any
) -> tuple[dspy.Module, Any, dict[str, Any], list]:
    """A copy of ``student`` to compile (sharing its retriever, marked not compiled), the task LM, the
    LM of each of ``student``'s predictors, and the DSPy callbacks to compile with.

    For a ``single_lm`` optimizer the copy's predictors lose their own LMs and the task LM is the one
    they share; otherwise a RoleLMs callback gives each its role's LM."""
    lms = {name: pred.lm for name, pred in student.named_predictors()}
    callbacks = list(dspy.settings.get("callbacks") or [])
    with shared_retriever(student):
        student = student.deepcopy()
    student._compiled = False  # a loaded or earlier-compiled program is compiled again from its state
    if single_lm:
        task_lm = _one_lm(optimizer, list(lms.values()), task_lm)
        for _, pred in student.named_predictors():
            pred.lm = None
    else:
        callbacks.append(RoleLMs(student))
    return student, task_lm, lms, callbacks


def _run_optimizer(
    optimizer: Any, student: dspy.Module, kwargs: dict[str, Any], callbacks: list, task_lm: Any
) -> tuple[dspy.Module, Any]:
    """``optimizer.compile(student, **kwargs)`` in one thread, recording every LM call; returns the
    compiled program (its retriever no longer shared) and the ledger of the calls."""
    try:
        dspy_settings = {"num_threads": 1, "callbacks": callbacks, **({"lm": task_lm} if task_lm is not None else {})}
        with recording() as ledger, dspy.context(**dspy_settings):
            compiled = optimizer.compile(student, **kwargs)
    finally:
        unshare(student)
    return unshare(compiled), ledger


def _restore(compiled: dspy.Module, frozen: dict[str, Any], lms: dict[str, Any]) -> None:
    """Give the frozen predictors their states back and every predictor its LM (optimizers' copies
    lose or change them)."""
    for name, pred in compiled.named_predictors():
        if name in frozen:
            pred.load_state(frozen[name])
        if name in lms:
            pred.lm = lms[name]


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
    entry = get_optimizer(optimizer)
    ctx = OptimizerContext(
        metric=metric,
        feedback_metric=feedback_metric,
        proposer_lm=proposer_lm,
        task_lm=task_lm,
        n_train=len(trainset),
        seed=seed,
        metric_threshold=metric_threshold,
        frozen=tuple(dict.fromkeys(freeze or ())),
    )
    built = build_optimizer(optimizer, ctx, overrides)
    kwargs: dict[str, Any] = {"trainset": trainset, **built.compile_kwargs}
    if entry.uses_valset and valset:
        kwargs["valset"] = valset
    log.info("compiling with %s on %d train / %d val examples", optimizer, len(trainset), len(valset))
    student, task_lm, lms, callbacks = _fresh_student(student, optimizer, entry.single_lm, task_lm)
    t0 = time.perf_counter()
    compiled, ledger = _run_optimizer(built.optimizer, student, kwargs, callbacks, task_lm)
    _restore(compiled, frozen, lms)
    seconds = time.perf_counter() - t0
    cost = ledger.summary()
    cost["seconds"] = round(seconds, 3)
    search = search_summary(compiled)
    if search is not None:
        log.info(
            "%s tried %d candidate(s), scored on %d example(s); kept candidate %d (%s)", optimizer,
            len(search["candidates"]), search["examples"], search["kept"], search["candidates"][search["kept"]]["score"],
        )  # fmt: skip
    return CompileResult(
        program=compiled, optimizer=optimizer, settings=built.settings, cost=cost, seconds=seconds, search=search
    )


def search_summary(compiled: dspy.Module) -> dict | None:
    """What GEPA tried (its ``detailed_results``, kept by ``track_stats``): each candidate's instructions, the
    candidate it grew from, its mean score on the examples it selects on and the metric calls spent when it was
    found; which one was kept (candidate 0 is the student as it came). None for an optimizer that keeps no such
    record."""
    results = getattr(compiled, "detailed_results", None)
    if results is None or not getattr(results, "candidates", None):
        return None
    candidates = []
    for i, candidate in enumerate(results.candidates):
        candidates.append(
            {
                "instructions": {name: pred.signature.instructions for name, pred in candidate.named_predictors()},
                "parents": [p for p in (results.parents[i] or []) if p is not None],
                "score": round(float(results.val_aggregate_scores[i]), 4),
                "found_after_metric_calls": results.discovery_eval_counts[i],
            }
        )
    return {
        "candidates": candidates,
        "kept": results.best_idx,
        "examples": len(results.val_subscores[0]) if results.val_subscores else 0,
        "metric_calls": results.total_metric_calls,
        "full_evaluations": results.num_full_val_evals,
    }


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
