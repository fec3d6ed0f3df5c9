"""The main job (`sharp demo`, `make run`): plain RAG, then SHARP, on a small seeded sample, compared.

A first comparison within minutes: the default sample is small (5 questions), each system's headline is
printed as soon as it finishes, an ETA runs on every long step, and the end says how long a larger run
would take at the speeds just measured. Every time it gives is measured in this run, never assumed: SHARP's
ETA before its first answer is plain RAG's seconds per LM call (SHARP's draft is one call), and with no
measurement (every question answered from the cache) no estimate is printed. One MLflow parent run with a
nested run per system; a DSPy trace per question (``traces``).
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
LARGER = 100  # the sample the end of the demo suggests for a real comparison


@dataclass
class DemoResult:
    metrics: dict[str, dict] = field(default_factory=dict)
    # measured in this run over the questions no LM-cache hit shortened; None: none was
    seconds_per_q: dict[str, float | None] = field(default_factory=dict)
    seconds_per_call: dict[str, float | None] = field(default_factory=dict)
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


def measured_speed(rows: list[dict]) -> tuple[float | None, float | None]:
    """Seconds a question and seconds an LM call over the questions no LM-cache hit shortened (a cached
    call takes ~0 s, which would make a run look free); (None, None) when there is none."""
    cold = [r for r in rows if not r.get("cached_calls") and r.get("seconds") is not None]
    if not cold:
        return None, None
    seconds = sum(float(r["seconds"]) for r in cold)
    calls = sum(float(r.get("lm_calls") or 0) for r in cold)
    return seconds / len(cold), (seconds / calls if calls else None)


def run_demo(rt: Any, dataset: str, split: str, limit: int, seed: int, *, traces: bool = True) -> DemoResult:
    """Both systems on the same seeded sample, each logged to MLflow (the caller configured it)."""
    retrievers = {"default": open_retriever(rt, dataset)}
    examples = rt.examples(split, limit, seed)
    render.demo_plan(len(examples), dataset, split)
    out = DemoResult()
    with tracking.run(f"demo-{Path(dataset).stem}-{split}-{limit}", tags={"kind": "demo"}):
        for name in SYSTEMS:
            # SHARP's ETA until its first answer: its draft is one LM call, at plain RAG's measured speed
            prior = out.seconds_per_call.get("vanilla") if name == "sharp" else None
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
            out.seconds_per_q[name], out.seconds_per_call[name] = measured_speed(result.rows)
            out.notes.append(failure_note(result.rows, f"{name}: "))
            render.system_done(f"{LABELS[name]} ({name})", result.metrics, path)
    return out


def larger_run_seconds(seconds_per_q: dict[str, float | None], n: int, answered: int = 0) -> float | None:
    """How long both systems take on ``n`` questions at the speeds measured in this run, the ``answered``
    ones coming back from the LM cache; None when a system's speed was not measured."""
    if not seconds_per_q or any(v is None for v in seconds_per_q.values()):
        return None
    return max(n - answered, 0) * sum(v for v in seconds_per_q.values() if v is not None)
