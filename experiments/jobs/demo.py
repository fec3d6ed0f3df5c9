"""The main job (`sharp demo`, `make run`): plain RAG, then SHARP, on a small seeded sample, compared.

A first comparison within minutes: the default sample is small (5 questions), each system's headline is
printed as soon as it finishes, an ETA runs on every long step, and the end says how long a larger run
would take at the speeds just measured. One MLflow parent run with a nested run per system; a DSPy trace
per question (``traces``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import tracking
from experiments.console import render
from experiments.console.progress import counter, status
from experiments.jobs.evaluation import failure_note, log_to_mlflow, run_eval
from program.errors import IndexMissingError
from program.serving.registry import config_for
from program.systems.modes import retriever_overrides

log = logging.getLogger(__name__)

SYSTEMS = ("vanilla", "sharp")
LABELS = {"vanilla": "plain RAG", "sharp": "SHARP"}
# What the main job costs per question with the default local model on a 2-core CPU (STACK.md, RESULTS):
# plain RAG 15-30 s, SHARP about 3x that. Said before the first question, replaced by measurements after.
VANILLA_SECONDS = (15.0, 30.0)
SHARP_FACTOR = 3.0
LARGER = 100  # the sample the end of the demo suggests for a real comparison


@dataclass
class DemoResult:
    metrics: dict[str, dict] = field(default_factory=dict)
    seconds_per_q: dict[str, float] = field(default_factory=dict)
    notes: list[str | None] = field(default_factory=list)


def open_retriever(rt: Any, dataset: str) -> Any:
    """The dataset's retriever; its index is built first (once) when it is missing, with a progress bar."""
    try:
        with status(f"opening the {dataset} index (BM25, vectors, embedding model)"):
            return rt.retriever()
    except IndexMissingError:
        render.index_heads_up(dataset, rt.index_dir())
        rt.build_index(progress=counter("embedding passages", "passages"))
        with status(f"opening the {dataset} index"):
            return rt.retriever()


def build(rt: Any, name: str, retrievers: dict[str, Any]) -> tuple[Any, Path | None]:
    """The system with the retriever its config asks for (SHARP's second hop), one per kind, shared; for
    SHARP, the shipped compiled program where one fits the index and model (program/serving/shipped.py). (The
    module, the program file or None.)"""
    path = rt.program_path(None, name)
    if path is not None:
        with status(f"loading the compiled {LABELS.get(name, name)} program {path.name}"):
            return rt.load_program(path)[0], path
    overrides = retriever_overrides(config_for(name, None))
    key = json.dumps(overrides, sort_keys=True) if overrides else "default"
    if key not in retrievers:
        settings = ", ".join(f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items())
        with status(f"opening {LABELS.get(name, name)}'s retriever ({settings or 'default'})"):
            retrievers[key] = rt.retriever(overrides)
    return rt.system(name, retriever=retrievers[key]), None


def is_local(rt: Any) -> bool:
    models = rt.lm_config.summary()
    return all(str(models.get(role, "")).startswith("local/") for role in ("planner", "critic", "generator"))


def run_demo(rt: Any, dataset: str, split: str, limit: int, seed: int, *, traces: bool = True) -> DemoResult:
    """Both systems on the same seeded sample, each logged to MLflow (the caller configured it)."""
    retrievers = {"default": open_retriever(rt, dataset)}
    examples = rt.examples(split, limit, seed)
    render.demo_plan(len(examples), dataset, split, VANILLA_SECONDS if is_local(rt) else None, SHARP_FACTOR)
    out = DemoResult()
    with tracking.run(f"demo-{Path(dataset).stem}-{split}-{limit}", tags={"kind": "demo"}):
        for name in SYSTEMS:
            prior = out.seconds_per_q["vanilla"] * SHARP_FACTOR if name == "sharp" and out.seconds_per_q else None
            with tracking.run(name, nested=True, tags={"system": name}), tracking.dspy_traces(traces):
                module, program = build(rt, name, retrievers)
                result, settings, module, path = run_eval(
                    rt,
                    name,
                    examples,
                    split,
                    program_path=program,
                    module=module,
                    label=f"{LABELS[name]} ({program.stem if program else name})",
                    prior_seconds=prior,
                )
                tracking.log_params(settings)
                log_to_mlflow(result, settings, module, path)
            out.metrics[name] = result.metrics
            out.seconds_per_q[name] = float(result.metrics.get("seconds_per_q") or 0.0)
            out.notes.append(failure_note(result.rows, f"{name}: "))
            render.system_done(f"{LABELS[name]} ({name})", result.metrics, path)
    return out


def larger_run_seconds(seconds_per_q: dict[str, float], n: int) -> float:
    """How long both systems take on ``n`` questions at the speeds measured."""
    return n * sum(seconds_per_q.values())
