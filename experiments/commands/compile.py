"""`sharp compile`, `sharp export`, `sharp ship`: optimize a program, register it, ship it (`sharp tune`:
experiments/commands/tune.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from experiments import options as o

if TYPE_CHECKING:
    from experiments.jobs.compile_job import CompileOutcome

log = logging.getLogger(__name__)

Program = typer.Option(
    None, "--program", help="Start from a saved program (path or models:/NAME/VERSION) instead of a fresh system."
)
Seed = typer.Option(0, "--seed")

# ---- compile's options ---------------------------------------------------------------------------------
Optimizer = typer.Option("bootstrap", "--optimizer", help="labeled, bootstrap, bootstrap-rs, mipro, simba or gepa.")
Target = typer.Option(
    "program",
    "--target",
    help="program (every predictor's prompts), critic (the answer critic's calibrators) or planner (the hop "
    "planner's demos, from --demos' gold plans, scored by what its hops find).",
)
Demos = typer.Option(
    "musique,2wikimultihopqa",
    "--demos",
    help="--target planner: the datasets whose train questions with a gold or rule plan give the planner's demos.",
)
NTrain = typer.Option(24, "--n-train", help="Training questions (critic: the questions whose drafts it is fitted on).")
NVal = typer.Option(
    24, "--n-val", help="Validation questions (evaluated before and after; critic: its held-out drafts' questions)."
)
NSelect = typer.Option(
    None,
    "--n-select",
    help="Held-out train questions an optimizer that selects on a validation set (mipro, bootstrap-rs, gepa) "
    "scores its candidates on (default: --n-val); never the reported ones.",
)
ValSplit = typer.Option("train", "--val-split", help="'train' (held out from the train split, default) or 'dev'.")
Opt = typer.Option(None, "--opt", help="Optimizer setting KEY=VALUE (repeatable; the value read as YAML).")
MetricThreshold = typer.Option(None, "--metric-threshold", help="Keep bootstrapped demos scoring at least this.")
CriticReads = typer.Option(
    True,
    "--critic-reads/--no-critic-reads",
    help="--target critic: the critic LM reads every recorded round, so a judge (gate features plus its verdict) "
    "is fitted beside the gate (off: the gate alone; about half the recording's time).",
)
Recording = typer.Option(
    None,
    "--recording",
    help="--target critic: the recording of the questions' rounds to fit the critic on (made, or extended where "
    "it lacks questions; default WORKSPACE/compile/NAME/replay/KEY.jsonl).",
)
RecordActions = typer.Option(
    None,
    "--actions",
    help="--target critic: the repairs the recording holds, or records where it lacks them (comma list of "
    "retrieve, compare, focus; default every repair). Focused reads follow flagged drafts.",
)
CompileOffset = typer.Option(
    0,
    "--train-offset",
    help="Skip the first N seeded train questions (e.g. the ones a ranker was fitted on, so the answer critic "
    "sees ranker scores of unseen questions).",
)
Freeze = typer.Option(
    None,
    "--freeze",
    help="A role whose demos and instructions stay as in --program (repeatable), e.g. --freeze critic after "
    "`--target critic`.",
)


@o.shared(
    o.SYSTEM_CONFIG,
    o.RETRIEVER_MODE,
    o.RETRIEVER_SET,
    o.WHERE,
    o.LMS,
    o.PROPOSER_LM,
    o.CACHE,
    o.TRACKING_URI,
    o.EXPERIMENT,
)
def compile_cmd(
    system: str = typer.Option("sharp", "--system", help="System to compile (see the registry)."),
    optimizer: str = Optimizer,
    target: str = Target,
    metric: str = typer.Option("f1", "--metric", help="f1 or em."),
    n_train: int = NTrain,
    n_val: int = NVal,
    n_select: int | None = NSelect,
    val_split: str = ValSplit,
    name: str | None = typer.Option(None, "--name", help="Program name (workspace/programs/NAME.json)."),
    opt: list[str] | None = Opt,
    metric_threshold: float | None = MetricThreshold,
    seed: int = Seed,
    threads: int = typer.Option(1, "--threads", help="Threads for the before/after evaluations."),
    critic_reads: bool = CriticReads,
    recording: Path | None = Recording,
    actions: str | None = RecordActions,
    train_offset: int = CompileOffset,
    freeze: list[str] | None = Freeze,
    program: str | None = Program,
    demos: str = Demos,
    opts: o.Options = o.SHARED,
) -> None:
    """Compile a system's prompts and demos (or its critic alone, or its hop planner) and save the program."""
    from experiments.jobs.compile_job import CompileJob, check_sizes_early, compile_from_runtime

    if target == "planner":
        return _compile_planner(opts, optimizer, demos, n_select if n_select is not None else n_val, n_val,
                                train_offset, seed, o.parse_sets(opt, "--opt"), program, name)  # fmt: skip
    job = CompileJob(
        system=system,
        optimizer=optimizer,
        target=target,
        metric=metric,
        name=name,
        optimizer_settings=o.parse_sets(opt, "--opt"),
        metric_threshold=metric_threshold,
        seed=seed,
        threads=threads,
        critic_reads=critic_reads,
        recording=recording,
        actions=None if actions is None else tuple(a for a in actions.split(",") if a),
        freeze=tuple(freeze or ()),
    )
    check_sizes_early(job, n_train, n_val)
    system_config = opts.system_config()
    rt = o.build_runtime(opts, extra_roles=("proposer",))
    sizes = {"n_train": n_train, "n_val": n_val, "n_select": n_select, "train_offset": train_offset}
    path = o.program_path(program, rt)
    if path:  # --config/--set over the program: a bad key fails now, before any question is loaded
        rt.saved_program(path, system_config)
    out = compile_from_runtime(rt, job, **sizes, val_split=val_split, program_path=path, system_config=system_config)
    _show_compile(out)


def _compile_planner(
    opts: o.Options, optimizer: str, demos: str, n_select: int, n_val: int, offset: int, seed: int,
    settings: dict, program: str | None, name: str | None,
) -> None:  # fmt: skip
    from experiments.jobs.planner_job import compile_planner

    rt = o.build_runtime(opts, extra_roles=("proposer",))
    out = compile_planner(
        rt, optimizer=optimizer, demo_datasets=[d for d in demos.split(",") if d], n_select=n_select, n_val=n_val,
        train_offset=offset, seed=seed, settings=settings, program_path=o.program_path(program, rt), name=name,
    )  # fmt: skip
    typer.echo(f"program: {out.path}\nrun: {out.run_id}\nplanner demos: {out.demos} (train ids {out.demo_ids})")
    for key in ("metric", "valid", "hops_per_plan"):
        typer.echo(f"  {key:>15}: {out.before.get(key)} -> {out.after.get(key)}")
    if out.search:
        _show_search(out.search)
    typer.echo(f"  compile cost: {_cost(out.cost)}, {out.cost['seconds']:.0f}s")


def _show_search(search: dict) -> None:
    """What a searching optimizer tried: each candidate's score on the examples it selects on, which it kept."""
    scores = ", ".join(f"{i}: {c['score']:.3f}" for i, c in enumerate(search["candidates"]))
    kept = search["kept"]
    typer.echo(
        f"  search: {len(search['candidates'])} candidate(s) (0 is the program as it came), scored on "
        f"{search['examples']} selection example(s): {scores}; kept {kept}"
        + (" (the program as it came: no candidate scored higher)" if kept == 0 else "")
    )


def _show_compile(out: CompileOutcome) -> None:
    typer.echo(f"program: {out.path}\nrun: {out.run_id}")
    for key in ("em", "f1", "all_gold", "lm_calls_per_q"):
        b, a = out.before.get(key), out.after.get(key)
        if b is not None and a is not None:
            typer.echo(f"  {key:>15}: {b:.3f} -> {a:.3f}")
    if out.critic:
        _show_critic(out.critic)
    typer.echo(f"  compile cost: {_cost(out.cost)}, {out.cost['seconds']:.0f}s")
    if "recording" in out.cost:
        typer.echo(f"  recording the rounds: {_cost(out.cost['recording'])}")
    typer.echo(f"export it with: sharp export {out.run_id} --name NAME")


def _show_critic(critic: dict) -> None:
    """The answer critic on its held-out drafts: each view's AUROC [CI], Brier, ECE and triggers."""
    rep = critic["report"]
    views = [(k, rep[k]) for k in ("generator_confidence", "gate", "critic_alone", "judge") if rep.get(k)]
    held = rep["heldout"]
    typer.echo(
        f"  answer critic on {held['drafts']} held-out drafts of {held['questions']} questions (fitted on "
        f"{rep['fit']['drafts']} drafts; accept threshold {critic['threshold']:g}):"
    )
    typer.echo("  " + " " * 16 + "".join(f"{name:>22}" for name, _ in views))
    for key in ("auroc", "auroc_ci", "brier", "ece", "over_trigger", "under_trigger", "drafts"):
        cells = "".join(f"{_cell(v.get(key)):>22}" for _, v in views)
        typer.echo(f"  {key:>16}{cells}")
    typer.echo(f"  gate features: {', '.join(critic['gate_features'])}")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _cost(cost: dict) -> str:
    return f"{cost['lm_calls']} LM calls, {cost['prompt_tokens'] + cost['completion_tokens']} tokens"


# ---- export --------------------------------------------------------------------------------------------
@o.shared(o.WORKSPACE, o.TRACKING_URI, o.EXPERIMENT)
def export_cmd(
    run_id: str = typer.Argument(..., help="The MLflow run of a `sharp compile` or `sharp tune`."),
    name: str = typer.Option(..., "--name", help="Registered model name."),
    index_dir: Path | None = typer.Option(
        None, "--index-dir", help="Index the model opens (default: the one recorded in the program)."
    ),
    include_index: bool = typer.Option(False, "--include-index", help="Copy the index into the model."),
    bundle_code: bool = typer.Option(
        True, "--bundle-code/--no-bundle-code", help="Ship program/ and experiments/ as code_paths."
    ),
    opts: o.Options = o.SHARED,
) -> None:
    """Register a compiled/tuned program as an MLflow model (loads with mlflow.pyfunc.load_model)."""
    from experiments import settings
    from experiments.export import export_run

    o.start_tracking(opts, settings.workspace(opts.workspace))  # no runtime: the program names its index
    out = export_run(run_id, name, index_dir=index_dir, include_index=include_index, bundle_code=bundle_code)
    typer.echo(f"registered {out.model_uri} (export run {out.run_id})")
    typer.echo(f"serve:  mlflow models serve -m {out.model_uri} --env-manager local -p 5001")
    typer.echo(f'ask:    sharp ask --program {out.model_uri} "..."')


@o.shared(o.WHERE, o.LMS, o.CACHE)
def ship_cmd(
    program: Path = typer.Argument(..., help="A compiled or tuned program (workspace/programs/NAME.json)."),
    name: str = typer.Option(..., "--name", help="Its name in program/compiled/ (e.g. sharp-hotpotqa)."),
    command: list[str] | None = typer.Option(None, "--command", help="A command that made it (repeatable)."),
    figure: list[str] | None = typer.Option(None, "--figure", help="A measured figure KEY=VALUE (repeatable)."),
    check_offset: int | None = typer.Option(
        None, "--check-offset", help="Replacing a shipped program: the held-out train questions start here (seeded)."
    ),
    check_n: int | None = typer.Option(None, "--check-n", help="... and are this many."),
    recording: Path | None = typer.Option(
        None, "--recording", help="The new program's recording of those questions (made where it lacks rounds)."
    ),
    force: bool = typer.Option(False, "--force", help="Ship even when it scores below the program it replaces."),
    opts: o.Options = o.SHARED,
) -> None:
    """Ship a compiled program as the default (program/compiled/): what `sharp ask`, `sharp eval --system
    sharp` and `sharp demo` run for its dataset and model when no --program is given. Replacing a shipped
    program, it must score at least as well on the same held-out train questions (--check-offset, --check-n;
    each program replayed over a recording of its rounds), or --force."""
    from experiments.jobs.ship import refuse_if_worse, ship_check, ship_program
    from program.serving import shipped

    current = shipped.COMPILED_DIR / f"{name}.json"
    figures = o.parse_sets(figure, "--figure")
    if current.is_file() and not force:
        if check_offset is None or check_n is None:
            raise typer.BadParameter(
                f"{name} is shipped already: give the held-out train questions to compare them on "
                "(--check-offset, --check-n), or --force",
                param_hint="--check-n",
            )
        rt = o.build_runtime(opts, track=False)
        examples = rt.examples("train", limit=check_offset + check_n)[check_offset:]
        check = ship_check(rt, program, current, examples, recording)
        typer.echo(
            f"held-out train {check_offset}:{check_offset + check_n}: new {check['new']['em']:.3f} EM, shipped "
            f"{check['shipped']['em']:.3f}, difference {check['delta_em']:+.3f} (95% CI {check['ci']})"
        )
        refuse_if_worse(check, name, force)
        figures = {**figures, "ship_check": check}
    out = ship_program(program, name, commands=command or [], figures=figures)
    typer.echo(f"shipped {out}; commit it with program/compiled/MANIFEST.json")


def register(app: typer.Typer) -> None:
    o.add_command(app, "compile", compile_cmd)
    o.add_command(app, "export", export_cmd)
    o.add_command(app, "ship", ship_cmd)
