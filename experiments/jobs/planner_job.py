"""`sharp compile --target planner`: the hop planner compiled on train, one MLflow run, the program saved.

Demos come from train questions with a gold or rule plan (``--demos``: MuSiQue's decompositions, 2Wiki's rule
plans; optimize/planner.py); an optimizer that selects (bootstrap-rs, mipro; gepa, which reflects on the plan
metric's feedback: why a plan was refused, the gold paragraphs its hops missed) scores its candidates on
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
    plan_feedback,
    plan_metric,
    plannable,
    planner_examples,
    score_plans,
)
from program.errors import ConfigError
from program.lm.roles import assign_lms
from program.systems.modes import retriever_overrides

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
    search: dict | None = None  # what the optimizer tried (GEPA's candidates and their scores)


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
    system_config: dict | None = None,
    report: bool = True,
) -> PlannerOutcome:
    """Compile ``runtime``'s SHARP program's hop planner (see the module); save it under ``name``. Without
    ``report`` (`sharp build`'s step) it is not scored before and after, and an optimizer that draws its demos
    (labeled) makes no LM call: the same program from the same inputs, rebuilt from a recording alone."""
    if report and n_val < 1:
        raise ConfigError("--n-val must be at least 1: the planner is reported before and after on it")
    program, retriever = _start(runtime, program_path, system_config)
    demos, selectset, valset = _sets(runtime, demo_datasets, n_select, n_val, train_offset, seed)
    search = lambda q, k: program.retriever.retrieve(q, k)  # noqa: E731
    metric = plan_metric(search)
    student = PlannerStudent(program.hop_planner, program.config)
    assign_lms(student, runtime.lm_config)
    name = name or f"sharp-{runtime.dataset}-planner-{optimizer}"
    params = {"dataset": runtime.dataset, "optimizer": optimizer, "demo_datasets": ",".join(demo_datasets),
              "demo_pool": len(demos), "n_select": len(selectset), "n_val": len(valset), "train_offset": train_offset,
              "seed": seed, "opt": dict(settings or {}), "start_program": str(program_path or ""),
              "lm": runtime.lm_config.summary()}  # fmt: skip
    with tracking.run(f"compile {name}", params=params, tags={"kind": "compile", "target": "planner"}) as active:
        before = score_plans(student, valset, metric) if report else {}
        tracking.log_metrics(tracking.numeric(before, "before."))
        result = compile_program(
            student, optimizer, demos, selectset, metric=metric, feedback_metric=plan_feedback(search),
            proposer_lm=proposer_for(runtime, optimizer), overrides=settings, metric_threshold=0.75, seed=seed,
        )  # fmt: skip
        after = score_plans(result.program, valset, metric) if report else {}
        tracking.log_metrics(tracking.numeric(after, "after."))
        if result.search is not None:
            tracking.log_json(result.search, "search.json")
        demo_ids = install(program, result.program)
        path = save_info(runtime, retriever).save(
            runtime.workspace / "programs" / f"{name}.json", program, "sharp", run_id=active.info.run_id,
            target="planner", optimizer=optimizer, planner_demo_ids=demo_ids, planner_before=before,
            planner_after=after,
        )  # fmt: skip
        tracking.log_file(path, "program")
    if report:
        log.info("saved %s (plan metric %.3f -> %.3f on %d held-out bridges)", path, before["metric"],
                 after["metric"], len(valset))  # fmt: skip
    return PlannerOutcome(
        path, active.info.run_id, before, after, len(program.hop_planner.demos), demo_ids, result.cost, result.search
    )


def _start(runtime: Runtime, program_path: str | Path | None, system_config: dict | None) -> tuple[Any, dict]:
    """The program whose planner is compiled, and the retriever settings it is saved with (it runs with them)."""
    if program_path:
        program, saved = runtime.load_program(program_path, system_config)
        return program, dict(saved.retriever)
    program = runtime.system("sharp", system_config or {})
    return program, retriever_overrides(program.config) or {}  # SHARP's default ranker=dataset, saved with it


def _sets(
    runtime: Runtime, datasets: list[str], n_select: int, n_val: int, offset: int, seed: int
) -> tuple[list, list, list]:
    """The demo pool (``datasets``' gold and rule plans), and the plannable train bridges after ``offset``: the
    ones candidates are selected on, then the held-out ones the planner is reported on. A question scored is
    never a demo (the pool may come from the same train split: MuSiQue's planner learns from MuSiQue)."""
    bridges = plannable(runtime.examples("train", seed=seed)[offset:])
    selectset, valset = split_train_val(planner_examples(bridges), select=n_select, val=n_val)
    scored = {ex.id for ex in [*selectset, *valset]}
    demos = [d for d in demo_pool(runtime, datasets, seed) if d.id not in scored]
    if not demos:
        raise ConfigError(f"no train question of {datasets} has a gold or rule plan to learn from")
    return demos, selectset, valset


def demo_pool(runtime: Runtime, datasets: list[str], seed: int) -> list[Any]:
    """Demo examples from the train splits of ``datasets`` (the runtime's data folder): their questions with a
    gold or rule plan."""
    from data.loaders import load_examples
    from experiments.runtime import dataset_source

    out = []
    for dataset in datasets:
        out += demo_examples(load_examples(dataset_source(dataset, runtime.data_dir), "train", seed=seed))
    return out
