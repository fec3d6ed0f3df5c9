"""``sharp tune``, tracked in MLflow: an Optuna study over SHARP's policy (optimize/policy_search.py).

One parent MLflow run per invocation (tagged with the study name), one nested run per trial,
then the best parameters, Optuna's plots, the replay speed-up and the tuned program (saved in
the workspace and logged as an artifact, ready for ``sharp export``).

The study, its objective (the em-cost objective's call cost included) and the scoring are
optimize/policy_search.py's: the base program's rounds are recorded live once (``--recording``, or under
``workspace/replay``) and every policy a trial proposes is replayed from them without calling the model.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments import tracking
from experiments.jobs.compile_job import SaveInfo, data_hash
from experiments.keyvalue import read_mapping
from optimize import recording
from optimize.evaluate import evaluate
from optimize.policy_search import (
    CallCost,
    Objective,
    ReplayScorer,
    SearchSpace,
    Tuner,
    baseline_trial,
    best_trial,
    enqueue_baseline,
    enqueue_every_repair,
    finished_trials,
    full_params,
    get_objective,
    open_study,
    params_of,
    run_study,
)
from optimize.storage import redact_url
from program.errors import ConfigError
from program.sharp.module import SharpRAG
from program.systems.modes import retriever_overrides

if TYPE_CHECKING:
    from experiments.runtime import Runtime

log = logging.getLogger(__name__)


def default_storage(ws: Path) -> str:
    return f"sqlite:///{ws / 'optuna.db'}"


@dataclass
class TuneJob:
    objective: str = "em-cost"
    n_trials: int = 20
    cost: CallCost | None = None  # em-cost: what an LM call costs (None: the objective's default)
    recording: Path | None = None  # the recording to replay (made, or extended, where it lacks questions)
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    threads: int = 1
    space: SearchSpace = field(default_factory=SearchSpace)
    verify: bool = False
    trial_runs: bool = True  # one nested MLflow run per trial (`sharp build` keeps the trials in its report only)
    plots: bool = True  # Optuna's plots of the study as artifacts (`sharp build`'s searches: their report alone)

    def __post_init__(self) -> None:
        get_objective(self.objective, self.cost)  # an unknown objective, or a call cost it would not use
        if self.n_trials < 1:
            raise ConfigError(f"--trials must be at least 1, got {self.n_trials}")


@dataclass
class TuneOutcome:
    study: str
    storage: str
    run_id: str
    best_params: dict
    best_values: list[float]
    path: Path
    trials_run: int
    speedup: dict
    verify: dict = field(default_factory=dict)
    baseline: dict = field(default_factory=dict)
    best_metrics: dict = field(default_factory=dict)
    call_cost: CallCost | None = None  # what the em-cost objective charged an LM call


def _trial_logger(space: SearchSpace) -> Callable[[Any, Any], None]:
    """An Optuna callback: one nested MLflow run per finished trial."""
    import mlflow
    from optuna.trial import TrialState

    def log_trial(study: Any, trial: Any) -> None:
        params = full_params(trial, space)
        with tracking.run(
            f"trial {trial.number}",
            params=params,
            nested=True,
            tags={
                "kind": "tune-trial",
                "study": study.study_name,
                "optuna.trial": str(trial.number),
                "optuna.state": trial.state.name,
            },
        ):
            if trial.state == TrialState.COMPLETE:
                mlflow.log_metrics(tracking.numeric(trial.user_attrs.get("metrics") or {}))
                mlflow.log_metric("trial_seconds", float(trial.user_attrs.get("seconds") or 0.0))
                mlflow.set_tag("recorded", str(trial.user_attrs.get("recorded")))

    return log_trial


def _numbered_from_zero(study: Any) -> Any:
    """The study's finished trials in an in-memory copy, numbered 0, 1, ... in order: Optuna's history plot
    indexes its values by trial number, so a study whose numbers start later (a study deleted and made
    again under its name starts at 1 in an RDB storage) raised IndexError and lost its plot."""
    import optuna
    from optuna.trial import TrialState

    copy = optuna.create_study(directions=study.directions)
    copy.add_trials(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    return copy


def _log_plots(study: Any, objective: Objective) -> list[str]:
    """Optuna's matplotlib plots as MLflow artifacts; a plot that cannot be drawn is skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import mlflow
    from optuna.visualization import matplotlib as om

    names = list(objective.keys)
    study = _numbered_from_zero(study)
    plots: dict[str, Callable[[], Any]] = {}
    if objective.multi:
        plots["pareto_front"] = lambda: om.plot_pareto_front(study, target_names=names)
        for i, key in enumerate(names):
            plots[f"history_{key}"] = lambda i=i, key=key: om.plot_optimization_history(
                study, target=lambda t: t.values[i], target_name=key
            )
        plots["param_importances"] = lambda: om.plot_param_importances(
            study, target=lambda t: t.values[0], target_name=names[0]
        )
    else:
        plots["history"] = lambda: om.plot_optimization_history(study, target_name=names[0])
        plots["param_importances"] = lambda: om.plot_param_importances(study)
    logged = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in plots.items():
            try:
                ax = make()
            except (ValueError, RuntimeError, ZeroDivisionError, IndexError) as exc:
                log.warning("plot %s skipped: %s", name, exc)
                continue
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            mlflow.log_figure(fig, f"plots/{name}.png")
            plt.close(fig)
            logged.append(name)
    return logged


def run_tune(
    job: TuneJob,
    base: SharpRAG,
    examples: Sequence[Any],
    *,
    workspace: Path,
    study_name: str,
    save: SaveInfo | None = None,
    params: dict | None = None,
    key_extra: Any = None,
    passages: Any = None,
) -> TuneOutcome:
    """Run (or resume) the study to ``job.n_trials`` finished trials; track it; save the best program.
    ``passages`` gives recorded passages their text (program.sharp.rounds.PassageLookup; None: titles only)."""
    objective = get_objective(job.objective, job.cost)
    storage = job.storage or default_storage(workspace)
    study = _open_tuning_study(job, base, storage, study_name, objective)
    record_path = job.recording or workspace / "replay" / f"{recording.reading_key(base, examples, key_extra)}.jsonl"
    scorer = _replay_scorer(job, base, examples, record_path, passages)
    run_params = _run_params(job, objective, base, examples, study_name, storage, record_path, params)
    tags = {"kind": "tune", "study": study_name, "objective": job.objective}
    with tracking.run(f"tune {study_name}", params=run_params, tags=tags) as active:
        callbacks = [_trial_logger(job.space)] if job.trial_runs else []
        ran = run_study(study, Tuner(job.space, objective, scorer), job.n_trials, callbacks=callbacks)
        log.info("study %s: %d trials run now, %d finished in all", study_name, ran, finished_trials(study))
        best = best_trial(study, objective)
        report = _tune_report(job, study, study_name, storage, objective, scorer, ran, best)
        found = report["best"]
        program = scorer.program_for(found["params"])
        path = _save_tuned(program, workspace / "programs" / f"{study_name}.json", save, active.info.run_id, report)
        tracking.log_json(report, "tune_report.json")
        return TuneOutcome(
            study=study_name,
            storage=storage,
            run_id=active.info.run_id,
            best_params=found["params"],
            best_values=list(best.values),
            path=path,
            trials_run=ran,
            speedup=report["replay"],
            verify=report["verify"],
            baseline=report["baseline"],
            best_metrics=found["metrics"],
            call_cost=objective.cost,
        )


def _open_tuning_study(job: TuneJob, base: SharpRAG, storage: str, study_name: str, objective: Objective) -> Any:
    """The study, resumed or new; a new one first tries the starting config and the every-repair corner."""
    study = open_study(storage, study_name, objective, seed=job.seed)
    enqueue_baseline(study, job.space, params_of(base.config))
    enqueue_every_repair(study, job.space)
    return study


def _replay_scorer(
    job: TuneJob, base: SharpRAG, examples: Sequence[Any], record_path: Path, passages: Any
) -> ReplayScorer:
    """What scores a trial: one recording of what the space's policies may reach, replayed per policy."""
    return ReplayScorer(
        base,
        examples,
        record_path,
        job.threads,
        job.space.needs_critic,
        passages,
        actions=job.space.actions,
        focus_when=job.space.focus_when_needed,
    )


def _tune_report(
    job: TuneJob,
    study: Any,
    study_name: str,
    storage: str,
    objective: Objective,
    scorer: ReplayScorer,
    ran: int,
    best: Any,
) -> dict:
    """The study's report (its trials, the best one, what replay saved), with the findings logged to the run."""
    report = {
        "study": study_name,
        "storage": redact_url(storage),
        "objective": job.objective,
        **({"call_cost": objective.cost.record()} if objective.cost else {}),
        **_study_report(study, objective, job.space, ran, best),
    }
    found = report["best"]
    report.update(_log_findings(study, objective, job, scorer, found["params"], found["metrics"]))
    return report


def _run_params(
    job: TuneJob,
    objective: Objective,
    base: SharpRAG,
    examples: Sequence[Any],
    study_name: str,
    storage: str,
    record_path: Path,
    params: dict | None,
) -> dict:
    """The tune run's MLflow params: the job, the study, the questions' digest, the base config, the recording."""
    return {
        "objective": job.objective,
        "n_trials": job.n_trials,
        "study": study_name,
        "storage": redact_url(storage),
        "seed": job.seed,
        "n_examples": len(examples),
        "data_hash": data_hash(examples),
        "space": job.space.model_dump(mode="json"),
        "base_config": base.config.model_dump(mode="json"),
        "recording": str(record_path),
        **({"cost_weight": objective.cost.weight, "max_calls": objective.cost.max_calls} if objective.cost else {}),
        **(params or {}),
    }


def _log_findings(
    study: Any, objective: Objective, job: TuneJob, scorer: ReplayScorer, best_params: dict, best_metrics: dict
) -> dict:
    """Log what the study found: the best trial (``best.*``), the replay's speed-up (``replay.*``), the
    default config's trial (``default.*``), Optuna's plots and, with ``job.verify``, the best policy run live
    (``verify.*``). Returns them for the report: replay, verify, baseline, plots."""
    import mlflow

    mlflow.log_params(tracking.flatten(best_params, "best."))
    mlflow.log_metrics(tracking.numeric(best_metrics, "best."))
    speed = scorer.speedup()
    mlflow.log_metrics(tracking.numeric(speed, "replay."))
    start = baseline_trial(study)
    baseline = (
        {
            "number": start.number,
            "params": full_params(start, job.space),
            "metrics": start.user_attrs.get("metrics") or {},
        }
        if start is not None
        else {}
    )
    if baseline:
        mlflow.log_metrics(tracking.numeric(baseline["metrics"], "default."))
    plots = _log_plots(study, objective) if job.plots else []
    verify = _verify(scorer, best_params, best_metrics, job.threads) if job.verify else {}
    if verify:
        mlflow.log_metrics(tracking.numeric(verify, "verify."))
    return {"replay": speed, "verify": verify, "baseline": baseline, "plots": plots}


def _study_report(study: Any, objective: Objective, space: SearchSpace, ran: int, best: Any) -> dict:
    """The trials: how many finished and ran now, the best (its params and metrics), and the Pareto front (or
    the best alone)."""
    front = [
        {"number": t.number, "values": t.values, "params": full_params(t, space)}
        for t in (study.best_trials if objective.multi else [best])
    ]
    metrics = dict(best.user_attrs.get("metrics") or {})
    return {
        "trials_finished": len([t for t in study.trials if t.values is not None]),
        "trials_run_now": ran,
        "best": {"number": best.number, "values": best.values, "params": full_params(best, space), "metrics": metrics},
        ("pareto_front" if objective.multi else "best_trials"): front,
    }


def _save_tuned(program: SharpRAG, path: Path, save: SaveInfo | None, run_id: str, report: dict) -> Path:
    """Save the tuned program (with the base's retriever, LM and index records, and the study's best in its
    meta) and log it as an artifact."""
    path = (save or SaveInfo()).save(
        path,
        program,
        SharpRAG.SYSTEM,
        run_id=run_id,
        study=report["study"],
        storage=report["storage"],
        objective=report["objective"],
        best_params=report["best"]["params"],
        best_values=list(report["best"]["values"]),
    )
    tracking.log_file(path, "program")
    return path


def _verify(scorer: ReplayScorer, params: dict, replayed: dict, threads: int) -> dict:
    """Run the best policy live and compare it with its replayed score (same calls, so equal)."""
    program = scorer.program_for(params)
    t0 = time.perf_counter()
    live = evaluate(program, scorer.examples, threads=threads, progress=False)
    seconds = time.perf_counter() - t0
    out = {"live_seconds": seconds}
    for key in ("em", "f1", "lm_calls_per_q"):
        out[f"live_{key}"] = live.metrics.get(key)
        out[f"replay_{key}"] = replayed.get(key)
    out["match"] = float(
        all(abs((out[f"live_{k}"] or 0) - (out[f"replay_{k}"] or 0)) < 1e-9 for k in ("em", "f1", "lm_calls_per_q"))
    )
    return out


# ---- composition from a Runtime (the CLI path) -------------------------------------------------------
def tune_from_runtime(
    runtime: Runtime,
    job: TuneJob,
    *,
    n_questions: int,
    split: str = "train",
    program_path: str | Path | None = None,
    system_config: dict | None = None,
    offset: int = 0,
) -> TuneOutcome:
    from experiments.jobs.compile_job import save_info

    skip = max(0, offset)
    examples = runtime.examples(split, limit=skip + n_questions, seed=job.seed)[skip:]
    if program_path:
        base, saved = runtime.load_program(program_path, system_config)
        base_retriever = dict(saved.retriever)
    else:
        base = runtime.system("sharp", system_config)
        base_retriever = retriever_overrides(base.config) or {}  # e.g. SHARP's default ranker=dataset
    study_name = job.study or f"sharp-{Path(runtime.dataset).stem}-{job.objective}"
    extra = {
        "lm": runtime.lm_config.model_dump(mode="json"),
        "retriever": base_retriever,
        "dataset": runtime.dataset,
        "split": split,
        **({"offset": skip} if skip else {}),
    }
    params = {
        "dataset": runtime.dataset,
        "split": split,
        "start_program": str(program_path or ""),
        "lm": runtime.lm_config.summary(),
    }
    return run_tune(
        job,
        base,
        examples,
        workspace=runtime.workspace,
        study_name=study_name,
        save=save_info(runtime, base_retriever),
        params=params,
        key_extra=extra,
        passages=runtime.passages(),
    )


def load_space(path: str | Path | None, fixed: dict | None = None) -> SearchSpace:
    """A search space from a YAML/JSON file (keys of SearchSpace), plus ``--fix`` pins."""
    values = read_mapping(path, "search space") if path else {}
    if fixed:
        values["fixed"] = {**values.get("fixed", {}), **fixed}
    return SearchSpace.from_mapping(values)
