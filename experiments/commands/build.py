"""`sharp build` (a model and a corpus in, a checked, shipped program out: experiments/jobs/build_job.py) and
`sharp record` (its LM-bound step on its own: experiments/jobs/recording_job.py)."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from experiments import options as o

if TYPE_CHECKING:
    from experiments.jobs.build_job import BuildOutcome

log = logging.getLogger(__name__)

# the options of both commands
Threads = typer.Option(1, "--threads", help="Questions recorded side by side, for a server (`sharp lm serve "
                       "--parallel N`, vLLM) or a remote API; the embedded local model answers one at a time (refused).")  # fmt: skip
MaxCost = typer.Option(None, "--max-cost", help="Dollars the recording may spend in this run (LiteLLM's cost map "
                       "prices the model; refused for a model it does not price). What was recorded is kept; the "
                       "same command goes on from there.")  # fmt: skip


# sharp build's own options
Limit = typer.Option(None, "--limit", help="Build on the first N seeded train questions (default: all of them).")
Heldout = typer.Option(
    None, "--heldout", help="Of them, the last N are held out (default: 30%): the gate and the ship check's."
)
PlannerDemos = typer.Option(
    None, "--planner-demos", help="Where the search space reaches the chain: the datasets whose train plans are the "
    "hop planner's demos (comma-separated; 'none': the planner stays uncompiled). Default: this corpus, musique "
    "and 2wikimultihopqa, those the data folder holds.",
)  # fmt: skip
FormFloors = typer.Option(
    None, "--form-floors", help="A program (JSON) each question form keeps at least the EM of, on the tuning "
    "questions (replayed over the build's recording: it must read as the build does). Every search charges a policy "
    "under a floor 1 plus the shortfall, so it takes one that keeps every floor, else the nearest. Default: none.",
)  # fmt: skip


@o.shared(o.WHERE, o.LMS, o.CACHE, o.SYSTEM_CONFIG, o.TRACKING_URI, o.EXPERIMENT)
def build_cmd(
    limit: int | None = Limit,
    heldout: int | None = Heldout,
    offset: int = typer.Option(0, "--offset", help="Skip the first N seeded train questions."),
    trials: int = typer.Option(300, "--trials", help="Optuna trials of each policy search (by replay, no LM call)."),
    space: Path | None = typer.Option(
        None, "--space", help="The policy's search space (YAML, SearchSpace keys; experiments/spaces/)."
    ),
    max_calls: float = typer.Option(2.5, "--max-calls", help="LM calls a question the policy may spend on average."),
    max_cost: float | None = MaxCost,
    threads: int = Threads,
    seed: int = typer.Option(0, "--seed", help="Seeds the questions' order, the fits and the searches."),
    ship: bool = typer.Option(True, "--ship/--no-ship", help="Ship the built program into program/compiled/."),
    force: bool = typer.Option(False, "--force", help="Ship even below the program it replaces."),
    planner_demos: str | None = PlannerDemos,
    form_floors: Path | None = FormFloors,
    opts: o.Options = o.SHARED,
) -> None:
    """Build SHARP for a model and a corpus: the index if missing, the evidence ranker, the recording of the train
    rounds (the LM-bound part: its cost said first), the answer rules, the gate, the policy, the held-out check,
    then ship it. Each step is skipped when its output is up to date; a stopped build resumes."""
    from experiments import settings
    from experiments.console.terminal import err_console
    from experiments.jobs.build_job import MIN_FIT, MIN_HELDOUT, Build, BuildJob
    from experiments.jobs.estimate import check_max_cost, price_of
    from experiments.jobs.recording_job import check_threads, model_of
    from program.errors import ConfigError

    lm_cfg = opts.lm_settings()
    model = model_of(lm_cfg)
    check_threads(lm_cfg, threads)
    check_max_cost(max_cost, price_of(model))
    sizes = {"--limit": limit, "--heldout": heldout, "--offset": offset, "--trials": trials, "--max-calls": max_calls,
             "--seed": seed, "--planner-demos": planner_demos}  # fmt: skip
    demos = None if planner_demos is None else tuple(d for d in planner_demos.split(",") if d and d != "none")
    if form_floors is not None and not form_floors.is_file():
        raise ConfigError(f"--form-floors: no program at {form_floors}")
    command = build_command(opts.dataset, model, sizes, space, settings.workspace(opts.workspace), form_floors,
                            deciding_options(opts))  # fmt: skip
    job = BuildJob(limit=limit, heldout=heldout, offset=offset, seed=seed, trials=trials, space_path=space,
                   max_calls=max_calls, threads=threads, max_cost=max_cost, ship=ship, force=force, command=command,
                   system_config=opts.system_config(), planner_demos=demos, form_floors=form_floors)  # fmt: skip
    _check_folders(opts, demos, MIN_FIT, MIN_HELDOUT)
    rt = o.build_runtime(opts)

    def say(line: str) -> None:
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
        log.info("%s", line)

    say(f"building {command}")
    _show_build(Build(rt, job, say).run())


def _check_folders(opts: o.Options, demos: tuple[str, ...] | None, min_fit: int, min_heldout: int) -> None:
    """Before any work: the corpus folder builds, and every planner demo dataset asked for is there."""
    from data.buildable import check_buildable
    from experiments.runtime import dataset_source

    source = dataset_source(opts.dataset, opts.data_dir)
    check_buildable(source, min_fit, min_heldout)
    for name in set(demos or ()) - {source.name}:
        dataset_source(name, opts.data_dir).split_file("train")


def deciding_options(opts: o.Options) -> list[tuple[str, str]]:
    """The shared options given that decide what a build makes, as (flag, value) in the order a command line
    takes them: the system's config file and each --set, the role models and the LM config file. (--lm is the
    model, written by :func:`build_command`; --api-base, --cache-dir and the tracking store only say where.)"""
    from experiments import settings

    out: list[tuple[str, str]] = []
    for flag, path in (("--lm-config", opts.lm_file), ("--config", opts.config)):
        if path is not None:
            out.append((flag, str(settings.portable(Path(path).resolve()))))
    for flag, model in (("--planner-lm", opts.planner_lm), ("--critic-lm", opts.critic_lm),
                        ("--generator-lm", opts.generator_lm)):  # fmt: skip
        if model is not None:
            out.append((flag, model))
    out += [("--set", item) for item in opts.set_]
    return out


def build_command(
    dataset: str,
    model: str,
    sizes: dict,
    space: Path | None,
    ws: Path,
    form_floors: Path | None = None,
    options: Sequence[tuple[str, str]] = (),
) -> str:
    """The product command that rebuilds this program (recorded in the shipped program's manifest): the
    corpus, the model and what decides the program (``options``: :func:`deciding_options`); not where things
    run (--api-base, --threads, --workspace)."""
    from experiments import settings
    from program.serving.builds import build_command as base

    defaults = {"--limit": None, "--heldout": None, "--offset": 0, "--trials": 300, "--max-calls": 2.5, "--seed": 0,
                "--planner-demos": None}  # fmt: skip
    text = base(str(settings.portable(dataset, ws)), model)
    for flag, value in sizes.items():
        if value != defaults[flag]:
            text += f" {flag} {value:g}" if isinstance(value, float) else f" {flag} {value}"
    if space is not None:
        text += f" --space {shlex.quote(str(settings.portable(Path(space).resolve())))}"
    if form_floors is not None:
        text += f" --form-floors {shlex.quote(str(settings.portable(Path(form_floors).resolve())))}"
    for flag, value in options:
        text += f" {flag} {shlex.quote(value)}"
    return text


def _show_build(out: BuildOutcome) -> None:
    typer.echo(f"program: {out.program}")
    if out.shipped:
        typer.echo(f"shipped: {out.shipped}")
    if out.figures:
        f = out.figures
        typer.echo(
            f"held out ({f.get('heldout_questions')} questions): the draft alone {f.get('heldout_em_draft')} EM, the "
            f"program {f.get('heldout_em_program')} EM, {f.get('heldout_lm_calls_per_q')} LM calls a question; gate "
            f"AUROC {f.get('gate_auroc_heldout')}"
        )
    if out.logprobs is False:
        typer.echo("log-probabilities: none (the gate reads the features that remain)")
    ran = [s.name for s in out.steps if s.ran]
    typer.echo(f"steps run: {', '.join(ran) or 'none (every step was up to date)'}")
    typer.echo(f"run: {out.run_id}")


# ---- `sharp record`: the recording alone ---------------------------------------------------------------------
# sharp record's own options
CriticRange = typer.Option(None, "--critic-range", help="START:END seeded positions the critic LM reads (repeatable).")
Actions = typer.Option(
    None, "--actions", help="Comma-separated repairs to record (retrieve, compare, focus, chain; the draft always): "
    "default every repair of each question's form.",
)  # fmt: skip
FocusWhen = typer.Option(
    "flagged", "--focus-when",
    help="Record a focused read after flagged drafts only (flagged), or after every bridge draft (rejected).",
)  # fmt: skip


@o.shared(o.WHERE, o.LMS, o.CACHE)
def record_cmd(
    split: str = typer.Option("train", "--split"),
    offset: int = typer.Option(0, "--offset", help="Skip the first N seeded questions."),
    n: int = typer.Option(..., "--n", help="Questions to record (after --offset)."),
    seed: int = typer.Option(0, "--seed"),
    ranker: str | None = typer.Option(None, "--ranker", help="Evidence ranker name (default: the dataset's)."),
    critic_range: list[str] | None = CriticRange,
    actions: str | None = Actions,
    program: Path | None = typer.Option(None, "--program", help="A saved program (default: the uncompiled SHARP)."),
    focus_when: str = FocusWhen,
    out: Path = typer.Option(..., "--out", help="The recording (JSONL; resumed where it stopped)."),
    threads: int = Threads,
    max_cost: float | None = MaxCost,
    opts: o.Options = o.SHARED,
) -> None:
    """Record SHARP's rounds on seeded questions, for the gate's fit and the policy's replay (what `sharp build`
    records). Resumable: a stopped run records only the rounds its file lacks for this program's reading (a
    recording of the drafts alone grows into one with every repair without reading a draft twice)."""
    from dataclasses import replace

    from experiments.jobs.estimate import price_of
    from experiments.jobs.recording_job import Recording, check_threads, model_of, record_rounds

    wanted = _actions(actions, focus_when)
    ranges = [_range(r) for r in critic_range or []]
    lm_cfg = opts.lm_settings()
    check_threads(lm_cfg, threads)
    price = price_of(model_of(lm_cfg))
    if ranker:
        opts = replace(opts, retriever_set=(*opts.retriever_set, f"ranker={ranker}"))
    rt = o.build_runtime(opts, track=False)
    examples = rt.examples(split, limit=offset + n, seed=seed)
    position = {ex.id: i for i, ex in enumerate(examples)}
    module = rt.load_program(program)[0] if program else rt.system("sharp", {})
    job = Recording(
        program=module,
        examples=examples[offset:],
        path=out,
        passages=rt.passages(),
        price=price,
        actions=wanted,
        focus_when=focus_when,
        critique=lambda ex: any(a <= position[ex.id] < b for a, b in ranges),
        threads=threads,
        max_cost=max_cost,
        command="the same `sharp record` command",
    )
    done = record_rounds(job)
    typer.echo(
        f"{out}: {done.questions} questions, {done.left} recorded now ({done.spent.lm_calls} LM calls, "
        f"{done.spent.prompt_tokens + done.spent.completion_tokens} tokens)"
    )


def _actions(actions: str | None, focus_when: str) -> tuple[str, ...] | None:
    """--actions as the repairs to record (None: every one), refused where it names another, as --focus-when is."""
    from program.errors import ConfigError
    from program.sharp.rounds import ACTIONS

    wanted = None if actions is None else tuple(a for a in actions.split(",") if a and a != "draft")
    unknown = sorted(set(wanted or ()) - set(ACTIONS))
    if unknown:
        raise ConfigError(f"--actions: unknown {unknown}; choose from {', '.join(ACTIONS)}")
    if focus_when not in ("flagged", "rejected"):
        raise ConfigError(f"--focus-when: 'flagged' or 'rejected', not {focus_when!r}")
    return wanted


def _range(text: str) -> tuple[int, int]:
    from program.errors import ConfigError

    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError(f"--critic-range takes START:END (seeded positions), not {text!r}") from None
    return start, end


def register(app: typer.Typer) -> None:
    o.add_command(app, "build", build_cmd)
    o.add_command(app, "record", record_cmd)
