"""`sharp ask`, `sharp eval` and `sharp demo` (the README's main job)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

from experiments import options as o

log = logging.getLogger(__name__)


def _fail(exc: Exception) -> None:
    from rich.markup import escape

    from experiments.render import err_console

    err_console.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(2)


def ask(
    question: str = typer.Argument(..., help="The question to answer."),
    system: str = typer.Option("sharp", "--system", "-s", help="System to run (see `sharp eval --help`)."),
    program: str | None = typer.Option(None, "--program", help="A saved program: file path or models:/NAME/VERSION."),
    dataset: str = o.Dataset,
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    lm: str | None = o.LM,
    api_base: str | None = o.ApiBase,
    planner_lm: str | None = o.PlannerLM,
    critic_lm: str | None = o.CriticLM,
    generator_lm: str | None = o.GeneratorLM,
    lm_config: Path | None = o.LMConfigFile,
    no_cache: bool = o.NoCache,
    config: Path | None = o.Config,
    set_: list[str] | None = o.Set,
    chroma_url: str | None = o.ChromaUrl,
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI to resolve --program models:/NAME/VERSION from."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as one JSON object."),
) -> None:
    """Answer one question and show how: plan, each round's verdict and confidence, evidence, cost."""
    from experiments import progress, render
    from program.errors import SharpError

    try:
        lm_cfg = o.lm_config(
            lm_config, lm, api_base, planner_lm=planner_lm, critic_lm=critic_lm, generator_lm=generator_lm
        )
        o.check_lms(lm_cfg)  # a server that is down fails now, before the index and models load
        rt = o.runtime(dataset, data_dir, workspace, lm_cfg, no_cache, chroma_url=chroma_url)
        with progress.status("opening the index and building the program", enabled=not as_json):
            if program:
                from experiments.export import resolve_program_path

                module, _ = rt.load_program(resolve_program_path(program, rt.workspace, tracking_uri=tracking_uri))
            else:
                module = rt.system(system, {**o.read_mapping(config), **o.parse_sets(set_)})
        with render.live_steps(enabled=not as_json):
            pred = module(question=question)
    except SharpError as exc:
        _fail(exc)
    if as_json:
        out = {k: pred.get(k) for k in pred if k != "passages"}
        out["passages"] = [p.to_dict() for p in pred.passages]
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        return
    render.prediction(pred, question)


def eval_(
    system: str = typer.Option("sharp", "--system", "-s", help="sharp | vanilla | any registered system."),
    program: str | None = typer.Option(None, "--program", help="Evaluate a saved program instead of a fresh system."),
    dataset: str = o.Dataset,
    split: str = typer.Option("dev", "--split"),
    limit: int | None = typer.Option(None, "--limit", help="A seeded sample of N questions."),
    seed: int = typer.Option(0, "--seed"),
    balanced: bool = typer.Option(False, "--balanced", help="Balance by type."),
    threads: int = typer.Option(1, "--threads", help="Parallel questions (helps for remote LMs)."),
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    lm: str | None = o.LM,
    api_base: str | None = o.ApiBase,
    planner_lm: str | None = o.PlannerLM,
    critic_lm: str | None = o.CriticLM,
    generator_lm: str | None = o.GeneratorLM,
    lm_config: Path | None = o.LMConfigFile,
    no_cache: bool = o.NoCache,
    cache_dir: Path | None = o.CacheDir,
    config: Path | None = o.Config,
    set_: list[str] | None = o.Set,
    retriever_set: list[str] | None = o.RetrieverSet,
    chroma_url: str | None = o.ChromaUrl,
    tracking_uri: str | None = o.TrackingUri,
    traces: bool = typer.Option(True, "--traces/--no-traces", help="Record DSPy traces in MLflow."),
    as_json: bool = typer.Option(False, "--json", help="Print the aggregate metrics as one JSON object."),
) -> None:
    """Evaluate a system on a split; resumable; one MLflow run with config, metrics and the per-question table."""
    from experiments import render, tracking
    from experiments.evaluation import build, failure_note, log_to_mlflow, run_eval
    from program.errors import SharpError

    try:
        lm_cfg = o.lm_config(
            lm_config, lm, api_base, planner_lm=planner_lm, critic_lm=critic_lm, generator_lm=generator_lm
        )
        o.check_lms(lm_cfg)  # a server that is down fails now, before the index and models load
        rt = o.runtime(
            dataset,
            data_dir,
            workspace,
            lm_cfg,
            no_cache,
            cache_dir,
            retriever=o.parse_sets(retriever_set),
            chroma_url=chroma_url,
        )
        tracking.configure(tracking_uri, rt.workspace)  # fail fast, before any LM work
        examples = rt.examples(split, limit, seed, balanced)
        program_path = None
        if program:
            from experiments.export import resolve_program_path

            program_path = resolve_program_path(program, rt.workspace)
        module, name = build(rt, system, {**o.read_mapping(config), **o.parse_sets(set_)}, program_path)
        with (
            tracking.run(f"eval-{name}-{Path(dataset).stem}-{split}", tags={"kind": "eval", "system": name}),
            tracking.dspy_traces(traces),
        ):
            result, settings, module, path = run_eval(
                rt,
                name,
                examples,
                split,
                program_path=program_path,
                threads=threads,
                progress=not as_json,
                module=module,
            )
            tracking.log_params({**settings, "limit": limit, "seed": seed, "balanced": balanced})
            log_to_mlflow(result, settings, module, path)
    except SharpError as exc:
        _fail(exc)
    if as_json:
        sys.stdout.write(json.dumps({"metrics": result.metrics, "by_type": result.by_type}, default=str) + "\n")
    else:
        render.console.print(render.metrics_table({name: result.metrics}, f"{name} on {dataset} {split}"))
        render.console.print(f"results: {path}")
    o.exit_if_failed([failure_note(result.rows)])


def demo(
    dataset: str = o.Dataset,
    split: str = typer.Option("dev", "--split"),
    limit: int = typer.Option(
        5,
        "--limit",
        help="Seeded sample size. 5: a first comparison in about 10 min on a 2-core CPU; 100 for a real one "
        "(a larger sample extends a smaller one).",
    ),
    seed: int = typer.Option(0, "--seed"),
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    lm: str | None = o.LM,
    api_base: str | None = o.ApiBase,
    critic_lm: str | None = o.CriticLM,
    chroma_url: str | None = o.ChromaUrl,
    tracking_uri: str | None = o.TrackingUri,
    traces: bool = typer.Option(True, "--traces/--no-traces", help="Record a DSPy trace per question in MLflow."),
) -> None:
    """The main job: build the index if needed, run plain RAG and SHARP on a seeded sample, compare."""
    from experiments import demo as main_job
    from experiments import logs, render, tracking
    from optimize.storage import redact_url
    from program.errors import SharpError

    try:
        lm_cfg = o.lm_config(None, lm, api_base, critic_lm=critic_lm)
        o.check_lms(lm_cfg)  # a server that is down fails now, before the index is built or models load
        rt = o.runtime(dataset, data_dir, workspace, lm_cfg, chroma_url=chroma_url)
        uri = tracking.configure(tracking_uri, rt.workspace)
        done = main_job.run_demo(rt, dataset, split, limit, seed, traces=traces)
    except SharpError as exc:
        _fail(exc)
    render.demo_end(
        done.metrics,
        f"SHARP vs plain RAG, {limit} seeded {dataset} {split} questions",
        limit,
        main_job.LARGER,
        main_job.larger_run_seconds(done.seconds_per_q, main_job.LARGER),
        redact_url(uri),
        traces,
        logs.log_file(),
    )
    o.exit_if_failed(done.notes)


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
    app.command("eval")(eval_)
    app.command("demo")(demo)
