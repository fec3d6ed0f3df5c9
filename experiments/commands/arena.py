"""`sharp arena`: several systems on the same questions; resumable; MLflow runs; a report folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from experiments import options as o

if TYPE_CHECKING:
    from experiments.jobs.arena import ArenaResult, ArenaSpec
    from experiments.runtime import Runtime


Systems = typer.Option(
    "all",
    "--systems",
    help="Comma list of systems, or 'all'. E.g. sharp,vanilla,vanilla-hybrid,self-rag,crag,adaptive,react,closed-book.",
)
Name = typer.Option(
    None,
    "--name",
    help="Arena name (report folder workspace/reports/arena-NAME; default from dataset, split, limit, seed). "
    "The same name resumes.",
)
Step = typer.Option(
    None,
    "--step",
    help="Interleave: every unfinished system answers the first STEP questions, then the first 2*STEP, ...; "
    "stopped early, every system has a common prefix of the sample.",
)
ReportOnly = typer.Option(
    False,
    "--report-only",
    help="Rebuild the report from the result files as they stand (partial systems on the questions they "
    "answered); runs nothing, loads no model, logs nothing to MLflow.",
)
Programs = typer.Option(
    None,
    "--program",
    help="A saved program as one more entrant (repeatable): PATH, NAME=PATH or NAME=models:/M/V; the name "
    "defaults to the file's stem.",
)
Report = typer.Option(
    None,
    "--report",
    help="Write the report into this subfolder of the arena folder (the result files stay shared), "
    "e.g. --report compiled.",
)
ResultsDir = typer.Option(
    None,
    "--results-dir",
    help="Also keep each system's compact rows (answer, EM, F1, all-gold, cost, stop reason; no traces) "
    "in DIR/SYSTEM.jsonl, to commit (e.g. experiments/results/NAME); the arena resumes from them and "
    "--report-only rebuilds the report from them on a machine without the workspace.",
)
Configs = o.CONFIG.but(help="YAML/JSON mapping: system name -> its config.")
Sets = o.SET.but(
    help="One system's key: --set crag.upper=0.7, or a --program entrant's: --set NAME.confidence_threshold=0.5 "
    "(repeatable; KEY=VALUE, the value read as YAML)."
)


@o.shared(o.WHERE, o.LMS, o.JUDGE_LM, o.CACHE, o.RETRIEVER_SET, o.CHROMA_URL, Configs, Sets, o.TRACKING_URI)
def arena(
    systems: str = Systems,
    split: str = typer.Option("dev", "--split"),
    limit: int | None = typer.Option(None, "--limit", help="A seeded sample of N questions (the same for all)."),
    balanced: bool = typer.Option(False, "--balanced", help="Balance the sample by question type."),
    seed: int = typer.Option(0, "--seed"),
    name: str | None = Name,
    baseline: str = typer.Option("vanilla", "--baseline", help="System the paired differences are taken against."),
    judge: bool = typer.Option(
        False, "--judge", help="Add LLM-as-judge answer accuracy and faithfulness (role judge)."
    ),
    threads: int = typer.Option(1, "--threads", help="Parallel questions per system (helps for remote LMs)."),
    step: int | None = Step,
    report_only: bool = ReportOnly,
    program: list[str] | None = Programs,
    report: str | None = Report,
    results_dir: Path | None = ResultsDir,
    opts: o.Options = o.SHARED,
    no_tracking: bool = typer.Option(False, "--no-tracking", help="Write the report only; no MLflow runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
    traces: bool = typer.Option(True, "--traces/--no-traces", help="Record a DSPy trace per question in MLflow."),
) -> None:
    """Compare systems on the same questions: EM/F1 with paired CIs against the baseline, cost, Pareto front,
    per-type scores and grader decision rates. Interrupted arenas resume; finished systems are not rerun."""
    from experiments.jobs.arena import ArenaSpec, resolve_systems

    names = resolve_systems(systems)  # an unknown name fails here, before any model or index is loaded
    configs = opts.system_config()
    rt, programs, track = _runtime(opts, program or [], judge, report_only, no_tracking)
    spec = ArenaSpec(
        systems=names,
        split=split,
        limit=limit,
        balanced=balanced,
        seed=seed,
        name=name,
        baseline=baseline,
        judge=judge,
        threads=threads,
        step=step,
        report_only=report_only,
        configs=configs,
        skip_unavailable=systems.strip() == "all",
        programs=programs,
        report=report,
        results_dir=results_dir,
    )
    result = _run(rt, spec, track, traces, progress=not as_json)
    _show(result, f"arena on {opts.dataset} {split}", report_only, as_json)


def _runtime(
    opts: o.Options, program: list[str], judge: bool, report_only: bool, no_tracking: bool
) -> tuple[Runtime, dict[str, str], bool]:
    """The arena's runtime (no LM for --report-only; the judge's with --judge), its --program entrants, and
    whether MLflow tracks the arena."""
    track = not (no_tracking or report_only)
    roles = ("judge",) if judge else ()
    rt = o.build_runtime(opts, lms=not report_only, extra_roles=roles, track=track)
    return rt, program_entrants(program, rt.workspace, None if no_tracking else opts.tracking_uri, rt), track


def _run(rt: Runtime, spec: ArenaSpec, track: bool, traces: bool, progress: bool) -> ArenaResult:
    """Run the arena; where it is tracked and ``traces`` asks, a DSPy trace per question goes to MLflow."""
    from experiments import tracking
    from experiments.jobs.arena import run_arena

    with tracking.dspy_traces(traces and track):
        return run_arena(rt, spec, track=track, progress=progress)


def _show(result: ArenaResult, title: str, report_only: bool, as_json: bool) -> None:
    from experiments.console import render, terminal
    from experiments.jobs.evaluation import failure_note

    notes = [failure_note(r.rows, f"{s}: ") for s, r in result.results.items()]
    if as_json:
        keys = ("ran", "reused", "skipped", "summary")
        out = {"report": str(result.report), **{k: getattr(result, k) for k in keys}}
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        o.exit_if_failed(notes)
        return
    table = {s: e["metrics"] for s, e in result.summary["systems"].items()}
    terminal.console.print(render.metrics_table(table, title))
    if report_only:
        terminal.console.print(f"report rebuilt from the result files of: {', '.join(result.reused)}")
    elif result.reused:
        terminal.console.print(f"reused finished systems (not rerun): {', '.join(result.reused)}")
    for system, why in result.skipped.items():
        terminal.err_console.print(f"[yellow]not run:[/yellow] {system}: {why}")
    terminal.console.print(f"report: {result.report} (plots in {result.folder})")
    o.exit_if_failed(notes)


def program_entrants(
    refs: list[str], workspace: Path, tracking_uri: str | None = None, rt: Runtime | None = None
) -> dict[str, str]:
    """--program values -> {entrant name: local program file}; MLflow URIs are downloaded (from
    ``tracking_uri`` when given); ``default`` is the shipped compiled program for ``rt``'s index and model."""
    from experiments.export import resolve_program_path
    from program.errors import ConfigError, ProgramFileError
    from program.serving import shipped

    out: dict[str, str] = {}
    for ref in refs:
        name, sep, target = ref.partition("=")
        if not sep:
            name, target = "", ref
        if target == shipped.DEFAULT:
            found = rt.program_path(target, "sharp") if rt is not None else None
            if found is None:
                raise ProgramFileError("--program default needs the runtime that says which shipped program fits")
            path, name = found, name or "sharp-compiled"
        else:
            path = resolve_program_path(target, workspace, tracking_uri=tracking_uri)
        if not name and target.startswith("models:/"):  # models:/NAME/VERSION -> NAME-vVERSION
            model, _, version = target[len("models:/") :].strip("/").partition("/")
            name = f"{model}-v{version}" if version else model.replace("@", "-")
        name = name or path.stem
        if name in out:
            raise ConfigError(f"two program entrants are named '{name}'; name them NAME=PATH")
        out[name] = str(path)
    return out


def register(app: typer.Typer) -> None:
    o.add_command(app, "arena", arena)
