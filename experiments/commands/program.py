"""`sharp ask`, `sharp eval` and `sharp demo` (the README's main job)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

from experiments import options as o

log = logging.getLogger(__name__)


Program = typer.Option(None, "--program", help="A saved program: file path or models:/NAME/VERSION.")
System = typer.Option("sharp", "--system", "-s", help="sharp | vanilla | any registered system.")
Split = typer.Option("dev", "--split")
Seed = typer.Option(0, "--seed")
ResolveFrom = o.TRACKING_URI.but(help="MLflow tracking URI to resolve --program models:/NAME/VERSION from.")


@o.shared(o.WHERE, o.LMS, o.CACHE, o.SYSTEM_CONFIG, o.CHROMA_URL, ResolveFrom)
def ask(
    question: str = typer.Argument(..., help="The question to answer."),
    system: str = typer.Option("sharp", "--system", "-s", help="System to run (see `sharp eval --help`)."),
    program: str | None = Program,
    opts: o.Options = o.SHARED,
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as one JSON object."),
) -> None:
    """Answer one question and show how: plan, each round's verdict and confidence, evidence, cost."""
    from experiments.console import progress, render

    system_config = opts.system_config()
    rt = o.build_runtime(opts, track=False)
    with progress.status("opening the index and building the program", enabled=not as_json):
        path = o.program_path(program, rt, opts.tracking_uri, system)
        module = rt.load_program(path, system_config)[0] if path else rt.system(system, system_config)
    with render.live_steps(enabled=not as_json):
        pred = module(question=question)
    if as_json:
        out = {k: pred.get(k) for k in pred if k != "passages"}
        out["passages"] = [p.to_dict() for p in pred.passages]
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        return
    render.prediction(pred, question)


@o.shared(o.WHERE, o.LMS, o.CACHE, o.SYSTEM_CONFIG, o.RETRIEVER_SET, o.CHROMA_URL, o.TRACKING_URI)
def eval_(
    system: str = System,
    program: str | None = typer.Option(None, "--program", help="Evaluate a saved program instead of a fresh system."),
    split: str = Split,
    limit: int | None = typer.Option(None, "--limit", help="A seeded sample of N questions."),
    seed: int = Seed,
    balanced: bool = typer.Option(False, "--balanced", help="Balance by type."),
    threads: int = typer.Option(1, "--threads", help="Parallel questions (helps for remote LMs)."),
    opts: o.Options = o.SHARED,
    traces: bool = typer.Option(True, "--traces/--no-traces", help="Record DSPy traces in MLflow."),
    as_json: bool = typer.Option(False, "--json", help="Print the aggregate metrics as one JSON object."),
) -> None:
    """Evaluate a system on a split; resumable; one MLflow run with config, metrics and the per-question table."""
    from experiments import tracking
    from experiments.console import render, terminal
    from experiments.jobs.evaluation import build, failure_note, run_and_log

    system_config = opts.system_config()
    rt = o.build_runtime(opts)
    examples = rt.examples(split, limit, seed, balanced)
    program_path = o.program_path(program, rt, opts.tracking_uri, system)
    module, name = build(rt, system, system_config, program_path)
    dataset = opts.dataset
    with (
        tracking.run(f"eval-{name}-{Path(dataset).stem}-{split}", tags={"kind": "eval", "system": name}),
        tracking.dspy_traces(traces),
    ):
        params = {"limit": limit, "seed": seed, "balanced": balanced}
        result, path = run_and_log(
            rt,
            name,
            examples,
            split,
            params,
            program_path=program_path,
            threads=threads,
            progress=not as_json,
            module=module,
        )
    if as_json:
        sys.stdout.write(json.dumps({"metrics": result.metrics, "by_type": result.by_type}, default=str) + "\n")
    else:
        terminal.console.print(render.metrics_table({name: result.metrics}, f"{name} on {dataset} {split}"))
        terminal.console.print(f"results: {path}")
    o.exit_if_failed([failure_note(result.rows)])


@o.shared(o.WHERE, o.LM, o.API_BASE, o.CRITIC_LM, o.CHROMA_URL, o.TRACKING_URI)
def demo(
    split: str = Split,
    limit: int = typer.Option(
        5,
        "--limit",
        help="Seeded sample size. 5: a first comparison (the end says how long 100 would take at the speeds "
        "measured); 100 for a real one (a larger sample extends a smaller one).",
    ),
    seed: int = Seed,
    opts: o.Options = o.SHARED,
    traces: bool = typer.Option(True, "--traces/--no-traces", help="Record a DSPy trace per question in MLflow."),
) -> None:
    """The main job: build the index if needed, run plain RAG and SHARP on a seeded sample, compare."""
    from experiments.console import logs, render
    from experiments.jobs import demo as main_job
    from optimize.storage import redact_url

    rt = o.build_runtime(opts, track=False)
    uri = o.start_tracking(opts, rt.workspace)
    dataset = opts.dataset
    done = main_job.run_demo(rt, dataset, split, limit, seed, traces=traces)
    render.demo_end(
        done.metrics,
        f"SHARP vs plain RAG, {limit} seeded {dataset} {split} questions",
        limit,
        main_job.LARGER,
        main_job.larger_run_seconds(done.seconds_per_q, main_job.LARGER, answered=limit),
        redact_url(uri),
        traces,
        logs.log_file(),
    )
    o.exit_if_failed(done.notes)


def register(app: typer.Typer) -> None:
    o.add_command(app, "ask", ask)
    o.add_command(app, "eval", eval_)
    o.add_command(app, "demo", demo)
