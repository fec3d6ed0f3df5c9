"""`sharp ask`, `sharp eval` and `sharp demo` (the README's main job)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from experiments import options as o

if TYPE_CHECKING:
    from experiments.runtime import Runtime

log = logging.getLogger(__name__)


Program = typer.Option(None, "--program", help="A saved program: file path or models:/NAME/VERSION.")
System = typer.Option("sharp", "--system", "-s", help="sharp | vanilla | any registered system.")
Split = typer.Option("dev", "--split")
Seed = typer.Option(0, "--seed")


def ask(
    question: str = typer.Argument(..., help="The question to answer."),
    system: str = typer.Option("sharp", "--system", "-s", help="System to run (see `sharp eval --help`)."),
    program: str | None = Program,
    dataset: str = o.Dataset,
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    lm: str | None = o.LM,
    api_base: str | None = o.ApiBase,
    planner_lm: str | None = o.PlannerLM,
    critic_lm: str | None = o.CriticLM,
    generator_lm: str | None = o.GeneratorLM,
    lm_file: Path | None = o.LMConfigFile,
    no_cache: bool = o.NoCache,
    cache_dir: Path | None = o.CacheDir,
    config: Path | None = o.Config,
    set_: list[str] | None = o.Set,
    chroma_url: str | None = o.ChromaUrl,
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI to resolve --program models:/NAME/VERSION from."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as one JSON object."),
) -> None:
    """Answer one question and show how: plan, each round's verdict and confidence, evidence, cost."""
    opts = o.Options.of(locals())
    system_config = opts.system_config()
    rt = o.build_runtime(opts, track=False)
    path = o.program_path(program, rt, opts.tracking_uri)
    module = rt.load_program(path)[0] if path else rt.system(system, system_config)
    pred = module(question=question)
    if as_json:
        out = {k: pred.get(k) for k in pred if k != "passages"}
        out["passages"] = [p.to_dict() for p in pred.passages]
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        return
    from experiments import render

    render.prediction(pred, question)


def eval_(
    system: str = System,
    program: str | None = typer.Option(None, "--program", help="Evaluate a saved program instead of a fresh system."),
    dataset: str = o.Dataset,
    split: str = Split,
    limit: int | None = typer.Option(None, "--limit", help="A seeded sample of N questions."),
    seed: int = Seed,
    balanced: bool = typer.Option(False, "--balanced", help="Balance by type."),
    threads: int = typer.Option(1, "--threads", help="Parallel questions (helps for remote LMs)."),
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    lm: str | None = o.LM,
    api_base: str | None = o.ApiBase,
    planner_lm: str | None = o.PlannerLM,
    critic_lm: str | None = o.CriticLM,
    generator_lm: str | None = o.GeneratorLM,
    lm_file: Path | None = o.LMConfigFile,
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
    from experiments.evaluation import build, failure_note, run_and_log

    opts = o.Options.of(locals())
    system_config = opts.system_config()
    rt = o.build_runtime(opts)
    examples = rt.examples(split, limit, seed, balanced)
    program_path = o.program_path(program, rt)
    module, name = build(rt, system, system_config, program_path)
    if traces:
        tracking.enable_dspy_traces()
    with tracking.run(f"eval-{name}-{Path(dataset).stem}-{split}", tags={"kind": "eval", "system": name}):
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
        render.console.print(render.metrics_table({name: result.metrics}, f"{name} on {dataset} {split}"))
        render.console.print(f"results: {path}")
    o.exit_if_failed([failure_note(result.rows)])


def demo(
    dataset: str = o.Dataset,
    split: str = Split,
    limit: int = typer.Option(20, "--limit", help="Seeded sample size."),
    seed: int = Seed,
    data_dir: Path | None = o.DataDir,
    workspace: Path | None = o.Workspace,
    lm: str | None = o.LM,
    api_base: str | None = o.ApiBase,
    critic_lm: str | None = o.CriticLM,
    chroma_url: str | None = o.ChromaUrl,
    tracking_uri: str | None = o.TrackingUri,
) -> None:
    """The main job: build the index if needed, run SHARP and plain RAG on a seeded sample, compare."""
    from experiments import render, tracking
    from experiments.evaluation import failure_note, run_and_log
    from optimize.storage import redact_url

    opts = o.Options.of(locals())
    rt = o.build_runtime(opts, track=False)
    uri = o.start_tracking(opts, rt.workspace)
    retriever = _retriever_building_the_index(rt, dataset)
    examples = rt.examples(split, limit, seed)
    results, notes = {}, []
    with tracking.run(f"demo-{Path(dataset).stem}-{split}-{limit}", tags={"kind": "demo"}):
        for name in ("vanilla", "sharp"):
            render.console.print(f"[bold]{name}[/bold] on {len(examples)} {dataset} {split} questions")
            with tracking.run(name, nested=True, tags={"system": name}):
                module = rt.system(name, retriever=retriever)
                result, _ = run_and_log(rt, name, examples, split, module=module)
            results[name] = result.metrics
            notes.append(failure_note(result.rows, f"{name}: "))
    title = f"SHARP vs plain RAG, {limit} seeded {dataset} {split} questions"
    render.console.print(render.metrics_table(results, title))
    render.console.print(
        f"MLflow: `make mlflow-ui` (or: mlflow ui --backend-store-uri {redact_url(uri)}) then open http://127.0.0.1:5000"
    )
    o.exit_if_failed(notes)


def _retriever_building_the_index(rt: Runtime, dataset: str) -> Any:
    from experiments import render
    from program.errors import IndexMissingError

    try:
        return rt.retriever()
    except IndexMissingError:
        render.console.print(f"[bold]building the {dataset} index[/bold] (once; a few minutes)")
        rt.build_index()
        return rt.retriever()


def register(app: typer.Typer) -> None:
    o.add_command(app, "ask", ask)
    o.add_command(app, "eval", eval_)
    o.add_command(app, "demo", demo)
