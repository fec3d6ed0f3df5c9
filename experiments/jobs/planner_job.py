"""`sharp compile --target planner`: the hop planner compiled on train, one MLflow run, the program saved.

Demos come from train questions with a gold or rule plan (``--demos``: MuSiQue's decompositions, 2Wiki's rule
plans; optimize/planner.py); an optimizer that selects (bootstrap-rs, mipro) scores its candidates on
``n_select`` of this dataset's train bridges that no rule plans, and the planner is reported before and after on
the next ``n_val`` (held out from every choice): the plan metric (valid plans, the gold paragraphs their hops
find with the gold answers written in), the share of plans Python accepts, hops a plan. The program keeps its
other predictors; the demos' train question ids are saved in its meta (a train measurement leaves them out).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import tracking
from experiments.jobs.compile_job import proposer_for, save_info, split_train_val
from experiments.runtime import Runtime
from optimize.compiler import compile_program
from optimize.planner import (
    PlannerStudent,
    demo_examples,
    install,
    plan_metric,
    plannable,
    planner_examples,
    score_plans,
)
from program.errors import ConfigError
from program.lm.roles import assign_lms

log = logging.getLogger(__name__)


@dataclass
class PlannerOutcome:
    path: Path
    run_id: str
    before: dict
    after: dict
    demos: int
    demo_ids: list[str]
    cost: dict


def compile_planner(
    runtime: Runtime,
    *,
    optimizer: str,
    demo_datasets: list[str],
    n_select: int,
    n_val: int,
    train_offset: int = 0,
    seed: int = 0,
    settings: dict | None = None,
    program_path: str | Path | None = None,
    name: str | None = None,
) -> PlannerOutcome:
    """Compile ``runtime``'s SHARP program's hop planner (see the module); save it under ``name``."""
    if n_val < 1:
        raise ConfigError("--n-val must be at least 1: the planner is reported before and after on it")
    program = runtime.load_program(program_path)[0] if program_path else runtime.system("sharp", {})
    demos, selectset, valset = _sets(runtime, demo_datasets, n_select, n_val, train_offset, seed)
    retriever = program.retriever
    metric = plan_metric(lambda q, k: retriever.retrieve(q, k))
    student = PlannerStudent(program.hop_planner, program.config)
    assign_lms(student, runtime.lm_config)
    name = name or f"sharp-{runtime.dataset}-planner-{optimizer}"
    params = {"dataset": runtime.dataset, "optimizer": optimizer, "demo_datasets": ",".join(demo_datasets),
              "demo_pool": len(demos), "n_select": len(selectset), "n_val": len(valset), "train_offset": train_offset,
              "seed": seed, "opt": dict(settings or {}), "start_program": str(program_path or ""),
              "lm": runtime.lm_config.summary()}  # fmt: skip
    with tracking.run(f"compile {name}", params=params, tags={"kind": "compile", "target": "planner"}) as active:
        before = score_plans(student, valset, metric)
        tracking.log_metrics(tracking.numeric(before, "before."))
        result = compile_program(
            student, optimizer, demos, selectset, metric=metric, proposer_lm=proposer_for(runtime, optimizer),
            overrides=settings, metric_threshold=0.75, seed=seed,
        )  # fmt: skip
        after = score_plans(result.program, valset, metric)
        tracking.log_metrics(tracking.numeric(after, "after."))
        demo_ids = install(program, result.program)
        path = save_info(runtime).save(
            runtime.workspace / "programs" / f"{name}.json", program, "sharp", run_id=active.info.run_id,
            target="planner", optimizer=optimizer, planner_demo_ids=demo_ids, planner_before=before,
            planner_after=after,
        )  # fmt: skip
        tracking.log_file(path, "program")
    log.info("saved %s (plan metric %.3f -> %.3f on %d held-out bridges)", path, before["metric"],
             after["metric"], len(valset))  # fmt: skip
    return PlannerOutcome(
        path, active.info.run_id, before, after, len(program.hop_planner.demos), demo_ids, result.cost
    )


def _sets(
    runtime: Runtime, datasets: list[str], n_select: int, n_val: int, offset: int, seed: int
) -> tuple[list, list, list]:
    """The demo pool (``datasets``' gold and rule plans), and the plannable train bridges after ``offset``: the
    ones candidates are selected on, then the held-out ones the planner is reported on."""
    demos = _demos(runtime, datasets, seed)
    if not demos:
        raise ConfigError(f"no train question of {datasets} has a gold or rule plan to learn from")
    bridges = plannable(runtime.examples("train", seed=seed)[offset:])
    selectset, valset = split_train_val(planner_examples(bridges), select=n_select, val=n_val)
    return demos, selectset, valset


def _demos(runtime: Runtime, datasets: list[str], seed: int) -> list[Any]:
    """Demo examples from the train splits of ``datasets`` (the runtime's data folder)."""
    out = []
    for dataset in datasets:
        from data.loaders import load_examples
        from experiments.runtime import dataset_source

        out += demo_examples(load_examples(dataset_source(dataset, runtime.data_dir), "train", seed=seed))
    return out
