"""One system evaluated on one split: resumable results file, settings recorded, MLflow logging."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dspy

from experiments import tracking
from experiments.runtime import Runtime
from optimize.evaluate import EvalResult, evaluate, is_failed
from program.digest import digest

log = logging.getLogger(__name__)


def build(
    rt: Runtime, system: str, config: Mapping[str, Any] | None = None, program_path: Path | None = None
) -> tuple[dspy.Module, str]:
    """The module to evaluate and its system name: from a saved program, or fresh from config."""
    if program_path:
        module, saved = rt.load_program(program_path)
        return module, saved.system
    return rt.system(system, config), system


def settings_of(
    rt: Runtime, system_name: str, module: dspy.Module, split: str, examples: list, program_path: Path | None = None
) -> dict:
    """Everything that decides the results: what a resumed run must share with the file."""
    return {
        "system": system_name,
        "dataset": rt.dataset,
        "split": split,
        "question_ids_hash": digest([e.id for e in examples], 12),
        "config": module.config.model_dump(mode="json"),
        "lm": rt.lm_config.summary(),
        # where the vectors live (chroma_url) changes no hit, so it does not start a new results file
        "retriever": {k: v for k, v in rt.retriever_config.items() if k != "chroma_url"},
        "program": str(program_path) if program_path else None,
        # prompts, demos and instructions: a changed prompt never resumes stale results
        "program_state_hash": digest(module.dump_state(), 12),
        "cache": rt.cache,
    }


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
) -> tuple[EvalResult, dict, dspy.Module, Path]:
    if module is None:
        module, system = build(rt, system, config, program_path)
    settings = settings_of(rt, system, module, split, examples, program_path)
    path = results_file(rt, settings)
    log.info("evaluating %s on %d %s questions; results in %s", system, len(examples), split, path)
    result = evaluate(module, examples, path, threads=threads, progress=progress, meta=settings)
    return result, settings, module, path


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
