"""`sharp tune`: search SHARP's policy with Optuna, replayed from one recording (experiments/jobs/tune_job.py runs and
tracks the study; optimize/policy_search.py holds the search space, the objectives and their call cost)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from experiments import options as o

if TYPE_CHECKING:
    from experiments.jobs.tune_job import TuneOutcome
    from optimize.policy_search import CallCost

log = logging.getLogger(__name__)

Objective = typer.Option(
    "em-cost",
    "--objective",
    help="em-cost (EM less --cost-weight per LM call beyond one, a penalty over --max-calls), f1, em, or f1-cost "
    "(F1 vs LM calls, Pareto).",
)
# left out: the em-cost objective's own (optimize.policy_search.CallCost; the help says its defaults, a test checks them)
CostWeight = typer.Option(
    None, "--cost-weight", help="em-cost only: EM given up for one more LM call a question (default: 0.02)."
)
MaxCalls = typer.Option(
    None,
    "--max-calls",
    help="em-cost only: the LM calls a question a policy may spend on average (over it: a penalty of 1; default: 2).",
)
Storage = typer.Option(
    None,
    "--storage",
    help="Where the study lives (default: sqlite in the workspace, one worker). Parallel workers: "
    "postgresql://USER:PASSWORD@HOST:PORT/DB, or journal:/PATH/study.journal on one machine.",
)
Recording = typer.Option(
    None,
    "--recording",
    help="The recording of the questions' rounds to replay (made, or extended where it lacks questions; default "
    "WORKSPACE/replay/KEY.jsonl).",
)
Space = typer.Option(None, "--space", help="YAML search space (SearchSpace keys).")
Fix = typer.Option(None, "--fix", help="Pin a parameter KEY=VALUE (repeatable; the value read as YAML).")
Program = typer.Option(
    None, "--program", help="Start from a saved program (path or models:/NAME/VERSION) instead of a fresh SHARP."
)


@o.shared(o.SYSTEM_CONFIG, o.WHERE, o.LMS, o.CACHE, o.TRACKING_URI, o.EXPERIMENT)
def tune_cmd(
    system: str = typer.Option("sharp", "--system", help="Only 'sharp' has a retry policy to tune."),
    trials: int = typer.Option(30, "--trials", help="Finished trials the study should have in all."),
    storage: str | None = Storage,
    study: str | None = typer.Option(None, "--study", help="Study name (default sharp-DATASET-OBJECTIVE)."),
    objective: str = Objective,
    cost_weight: float | None = CostWeight,
    max_calls: float | None = MaxCalls,
    recording: Path | None = Recording,
    n_questions: int = typer.Option(30, "--n", help="Questions to tune on."),
    split: str = typer.Option("train", "--split", help="Split to tune on (keep dev for the final report)."),
    train_offset: int = typer.Option(0, "--train-offset", help="Skip the first N seeded questions of the split."),
    space: Path | None = Space,
    fix: list[str] | None = Fix,
    verify: bool = typer.Option(False, "--verify", help="Run the best policy live and compare with replay."),
    seed: int = typer.Option(0, "--seed"),
    threads: int = typer.Option(1, "--threads", help="Threads for live recordings."),
    program: str | None = Program,
    opts: o.Options = o.SHARED,
) -> None:
    """Search SHARP's policy with Optuna, replayed from one recording: the accept threshold, when the critic
    reads a draft, each question form's repairs and how many, and how the answer is selected."""
    from experiments.jobs.tune_job import TuneJob, default_storage, load_space, tune_from_runtime
    from optimize.storage import check_storage
    from program.errors import ConfigError

    if system != "sharp":
        raise ConfigError(f"tune searches SHARP's retry policy; {system!r} has none")
    job = TuneJob(
        objective=objective,
        n_trials=trials,
        cost=call_cost(cost_weight, max_calls),
        recording=recording,
        storage=storage,
        study=study,
        seed=seed,
        threads=threads,
        space=load_space(space, o.parse_sets(fix, "--fix")),
        verify=verify,
    )
    system_config = opts.system_config()
    rt = o.build_runtime(opts)
    check_storage(storage or default_storage(rt.workspace))
    path = o.program_path(program, rt)
    if path:  # --config/--set over the program: a bad key fails now, before any question is loaded
        rt.saved_program(path, system_config)
    sizes = {"n_questions": n_questions, "split": split, "offset": train_offset}
    _show_tune(tune_from_runtime(rt, job, **sizes, program_path=path, system_config=system_config))


def call_cost(weight: float | None, max_calls: float | None) -> CallCost | None:
    """The em-cost objective's call cost from --cost-weight and --max-calls (None when both are left out: the
    objective's own); what is left out keeps its default."""
    if weight is None and max_calls is None:
        return None
    from optimize.policy_search import CallCost

    given = {"weight": weight, "max_calls": max_calls}
    return CallCost.from_mapping({k: v for k, v in given.items() if v is not None})


def _show_tune(out: TuneOutcome) -> None:
    typer.echo(f"study {out.study}: {out.trials_run} trials run now; best {out.best_values} with")
    for key, value in out.best_params.items():
        typer.echo(f"  {key} = {value}")
    if out.call_cost is not None:
        cap = "no cap" if out.call_cost.max_calls is None else f"at most {out.call_cost.max_calls:g} a question"
        typer.echo(f"em-cost: {out.call_cost.weight:g} EM a call beyond one, {cap}")
    if out.best_metrics:
        typer.echo(f"best: {_figures(out.best_metrics)}")
    if out.baseline:
        typer.echo("defaults (trial {}): ".format(out.baseline["number"]) + _figures(out.baseline["metrics"]))
    s = out.speedup
    if s.get("speedup_total"):
        typer.echo(
            f"replay: {s['recordings']} live recordings ({s['record_seconds']:.0f}s) + replay "
            f"({s['replay_seconds']:.2f}s) vs ~{s['live_seconds_estimate']:.0f}s of live evaluation: "
            f"{s['speedup_total']:.1f}x faster"
        )
    if out.verify:
        v = out.verify
        typer.echo(
            f"verify: live F1 {v['live_f1']:.3f} / replayed {v['replay_f1']:.3f}, live LM calls/q "
            f"{v['live_lm_calls_per_q']:.2f} / replayed {v['replay_lm_calls_per_q']:.2f} "
            f"({'match' if v['match'] else 'MISMATCH'}; live run {v['live_seconds']:.0f}s)"
        )
    typer.echo(f"program: {out.path}\nrun: {out.run_id}\nexport it with: sharp export {out.run_id} --name NAME")


def _figures(m: dict) -> str:
    return ", ".join(f"{k} {m[k]:.3f}" for k in ("em", "f1", "lm_calls_per_q") if isinstance(m.get(k), (int, float)))


def register(app: typer.Typer) -> None:
    o.add_command(app, "tune", tune_cmd)
