"""One system evaluated on one split: resumable results file, settings recorded, MLflow logging; and a
retriever scored against the gold titles of a split (`sharp eval-retrieval`, the retrieval studies)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy

from experiments import tracking
from experiments.console.progress import Tally, showing, watched
from experiments.runtime import Runtime, as_run
from experiments.settings import portable
from optimize.evaluate import EvalResult, evaluate, is_failed, read_rows
from optimize.metrics import question_row
from program.digest import digest
from program.errors import SharpError
from program.serving.saved import read_program

log = logging.getLogger(__name__)


def build(
    rt: Runtime, system: str, config: Mapping[str, Any] | None = None, program_path: Path | None = None
) -> tuple[dspy.Module, str]:
    """The module to evaluate and its system name: from a saved program (``config`` over its own), or fresh
    from ``config``."""
    if program_path:
        module, saved = rt.load_program(program_path, config)
        return module, saved.system
    return rt.system(system, config), system


def _program_settings(
    out: dict, program: tuple[str, Path], config: Mapping[str, Any] | None, retriever: dict, workspace: Path, state: Any
) -> Any:
    """Put a saved program entrant's system, name, file, config and retriever overrides (read from its
    file, as it runs) in ``out``; returns ``state``, or the program's where ``state`` is None."""
    name, path = program
    saved = as_run(read_program(path), config, retriever)
    out.update(
        system=saved.system,
        program=name,
        program_file=portable(path, workspace),
        config=saved.config,
        retriever={**retriever, "overrides": saved.retriever},
    )
    return saved.state if state is None else state


def settings_of(
    rt: Runtime,
    system: str,
    split: str,
    examples: list,
    *,
    config: Mapping[str, Any] | None = None,
    state: Any = None,
    program: tuple[str, Path] | None = None,
    judge: Any = None,
) -> dict:
    """Everything that decides a system's results (eval and arena): what a resumed results file must
    have been written with.

    ``config``: the system's config (JSON). ``state``: its dumped state where the module is built
    (prompts, demos, instructions, so a changed prompt never resumes stale rows). ``program``: a saved
    program's (entrant name, file); its system, config, retriever overrides and, without ``state``,
    its state are read from the file, nothing is built, so an edited or recompiled program never
    resumes stale rows either; ``config`` then holds the keys set over the program's config, and the
    runtime's retriever settings go over the program's, as the program runs them
    (experiments.runtime.as_run). ``judge``: the arena's answer judge. Where the vectors live
    (``chroma_url``) changes no hit, so it is left out. Paths (a dataset folder, the program file) are
    written relative to the checkout, or as WORKSPACE/... (settings.portable): the settings are saved next
    to the results, which may be committed.
    """
    retriever = {k: v for k, v in (rt.retriever_config or {}).items() if k != "chroma_url"}
    out = {
        "system": system,
        "dataset": portable(rt.dataset, rt.workspace),
        "split": split,
        "question_ids_hash": digest([e.id for e in examples], 12),
        "config": config,
        "lm": rt.lm_config.summary(),
        "retriever": retriever,
        "cache": rt.cache,
        "judge": judge.config.model_dump(mode="json") if judge is not None else None,
    }
    if program is not None:
        state = _program_settings(out, program, config, retriever, rt.workspace, state)
    if state is not None:
        out["program_state_hash"] = digest(state, 12)
    return out


def results_file(rt: Runtime, settings: dict, tag: str = "") -> Path:
    name = (
        f"{settings['system']}-{Path(settings['dataset']).stem}-{settings['split']}{tag}-{digest(settings, 12)}.jsonl"
    )
    return rt.workspace / "runs" / name


def run_eval(
    rt: Runtime,
    system: str,
    examples: list,
    split: str,
    config: Mapping[str, Any] | None = None,
    program_path: Path | None = None,
    threads: int = 1,
    progress: bool = True,
    module: dspy.Module | None = None,
    label: str | None = None,
    prior_seconds: float | None = None,
) -> tuple[EvalResult, dict, dspy.Module, Path]:
    """One system on ``examples``, resuming its results file, with a progress display (``label``, default
    the system's name; ``prior_seconds``: an ETA estimate per question until the first is answered)."""
    if module is None:
        module, system = build(rt, system, config, program_path)
    settings = settings_of(
        rt,
        system,
        split,
        examples,
        config=module.config.model_dump(mode="json"),
        state=module.dump_state(),
        program=(Path(program_path).stem, Path(program_path)) if program_path else None,
    )
    path = results_file(rt, settings)
    log.info("evaluating %s on %d %s questions; results in %s", system, len(examples), split, path)
    result = evaluate_shown(
        module,
        examples,
        path,
        label=label or system,
        progress=progress,
        prior_seconds=prior_seconds,
        threads=threads,
        meta=settings,
    )
    return result, settings, module, path


def answered_before(path: Path | None, examples: list, compact_path: Path | None = None) -> list[dict]:
    """The rows of these questions that a results file (or its compact copy) already holds answered: what
    a resumed evaluation will not ask again."""
    try:
        rows = read_rows(Path(path) if path else None, Path(compact_path) if compact_path else None)
    except (SharpError, OSError, ValueError):  # evaluate() itself says what is wrong with the file
        return []
    ids = {getattr(e, "id", None) for e in examples}
    return [r for i, r in rows.items() if i in ids and not is_failed(r)]


def evaluate_shown(
    system: Any,
    examples: list,
    path: Path | None,
    *,
    label: str,
    progress: bool = True,
    prior_seconds: float | None = None,
    row_fn: Any = question_row,
    compact_path: Path | None = None,
    **kwargs: Any,
) -> EvalResult:
    """:func:`optimize.evaluate.evaluate` with a progress display (experiments/console/progress.py): questions done
    of the total (a resumed file's included), elapsed, ETA, running EM. ``progress`` False: the log file
    only. ``prior_seconds``: an estimate per question for the ETA before the first one finishes."""
    before = answered_before(path, examples, compact_path)
    tally = Tally(
        len(examples),
        "questions",
        done=len(before),
        prior_seconds=prior_seconds,
        score_name="EM",
        score_sum=sum(float(r.get("em") or 0.0) for r in before),
        scored=len(before),
    )
    with showing(label, tally, enabled=progress) as shown:
        call, row = watched(system, row_fn, shown)
        return evaluate(call, examples, path, progress=False, row_fn=row, compact_path=compact_path, **kwargs)


def log_to_mlflow(
    result: EvalResult, settings: dict, module: dspy.Module, results_path: Path, prefix: str = ""
) -> None:
    """Metrics, per-question table, results file and the program's JSON state on the active run."""
    tracking.log_eval(result, prefix)
    tracking.log_json(module.dump_state(), f"{prefix}program_state.json")
    tracking.log_json(
        {"metrics": result.metrics, "by_type": result.by_type, "settings": settings}, f"{prefix}summary.json"
    )
    tracking.log_file(results_path, artifact_path="results")


def run_and_log(
    rt: Runtime, system: str, examples: list, split: str, params: Mapping[str, Any] | None = None, **kw: Any
) -> tuple[EvalResult, Path]:
    """:func:`run_eval` (``kw`` passed on) inside the active MLflow run: its settings and ``params`` logged
    as run parameters, then what :func:`log_to_mlflow` logs. (The result, the results file.)"""
    result, settings, module, path = run_eval(rt, system, examples, split, **kw)
    tracking.log_params({**settings, **(params or {})})
    log_to_mlflow(result, settings, module, path)
    return result, path


def failure_note(rows: list[dict], label: str = "") -> str | None:
    """What to tell the user when questions failed (None when none did): how many, the first cause."""
    failed = [r for r in rows if is_failed(r)]
    if not failed:
        return None
    first = failed[0].get("error") or next(
        (t["error"] for t in failed[0].get("trace") or [] if isinstance(t, dict) and t.get("error")), "?"
    )
    return (
        f"{label}{len(failed)} of {len(rows)} questions failed (not answered; counted in 'errors'); the first: "
        f"{first}. A rerun of the same command retries them."
    )


def evaluate_retriever(
    retriever: Any, questions: list, k: int, batch: int = 32, ks: Sequence[int] | None = None
) -> tuple[dict, dict]:
    """(metrics from optimize.retrieval_metrics.aggregate, latency summary) for questions at the cutoffs
    ``ks`` (default 2, 5, 10, 20 up to k, and k); the latency is that of asking for the largest cutoff.

    A retriever whose top-k is not the prefix of its top-K (``depends_on_k``: the second hop gives a share
    of k to hop passages) is asked once per cutoff, so each @cutoff scores what a system asking for that
    many passages gets."""
    import numpy as np

    from optimize.retrieval_metrics import aggregate

    ks = sorted(set(ks) if ks else {kk for kk in (2, 5, 10, 20) if kk <= k} | {k})
    asks = [(kk, [kk]) for kk in ks] if getattr(retriever, "depends_on_k", False) else [(max(ks), ks)]
    metrics: dict = {"overall": {}, "by_type": {}}
    per_query_ms = []
    for depth, cutoffs in asks:
        rows = []
        for start in range(0, len(questions), batch):
            chunk = questions[start : start + batch]
            t0 = time.perf_counter()
            hits = retriever.retrieve_many([ex.question for ex in chunk], depth)
            if depth == max(ks):
                per_query_ms.append((time.perf_counter() - t0) * 1000 / len(chunk))
            rows += [(ex.get("type"), [p.title for p in h], ex.get("gold_titles") or []) for ex, h in zip(chunk, hits)]
        part = aggregate(rows, cutoffs)
        metrics["overall"].update(part["overall"])
        for qtype, values in part["by_type"].items():
            metrics["by_type"].setdefault(qtype, {}).update(values)
        metrics["skipped"] = part["skipped"]
    return metrics, {"batched_ms_per_query": round(float(np.mean(per_query_ms)), 2) if per_query_ms else None}
