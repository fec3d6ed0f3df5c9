"""`sharp compile`, `sharp tune`, `sharp export`: optimize a program, tune its policy, ship it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import typer

from experiments import options as o
from program.errors import SharpError

log = logging.getLogger(__name__)


def _pairs(values: list[str] | None, what: str) -> dict[str, Any]:
    """``key=value`` options (values read as YAML scalars: 3, 0.5, true, [1, 2], null)."""
    import yaml

    out: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{what} takes key=value, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise typer.BadParameter(f"{what} {item!r}: {exc}") from None
    return out


def _fail(exc: Exception) -> None:
    from rich.markup import escape

    from experiments.render import err_console

    err_console.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(2)


def _program(ref: str | None, rt: Any) -> Path | None:
    if not ref:
        return None
    from experiments.export import resolve_program_path

    return resolve_program_path(ref, rt.workspace)


def _system_config(config: Path | None, sets: list[str] | None) -> dict:
    return {**o.read_mapping(config), **o.parse_sets(sets)}


PROGRAM = typer.Option(
    None, "--program", help="Start from a saved program (path or models:/NAME/VERSION) instead of a fresh system."
)
EXPERIMENT = typer.Option("sharp", "--experiment", help="MLflow experiment name.")


def register(app: typer.Typer) -> None:
    @app.command("compile")
    def compile_cmd(
        system: str = typer.Option("sharp", "--system", help="System to compile (see the registry)."),
        optimizer: str = typer.Option(
            "bootstrap", "--optimizer", help="bootstrap, bootstrap-rs, mipro, simba or gepa."
        ),
        target: str = typer.Option("program", "--target", help="program (every predictor) or critic (alone)."),
        metric: str = typer.Option("f1", "--metric", help="f1 or em."),
        n_train: int = typer.Option(24, "--n-train", help="Training questions (critic: questions harvested)."),
        n_val: int = typer.Option(24, "--n-val", help="Validation questions (evaluated before and after)."),
        n_select: int | None = typer.Option(
            None,
            "--n-select",
            help="Held-out train questions an optimizer that selects on a "
            "validation set (mipro, bootstrap-rs, gepa) scores its "
            "candidates on (default: --n-val); never the reported ones.",
        ),
        val_split: str = typer.Option(
            "train", "--val-split", help="'train' (held out from the train split, default) or 'dev'."
        ),
        name: str | None = typer.Option(None, "--name", help="Program name (workspace/programs/NAME.json)."),
        opt: list[str] | None = typer.Option(None, "--opt", help="Optimizer setting key=value (repeatable)."),
        metric_threshold: float | None = typer.Option(
            None, "--metric-threshold", help="Keep bootstrapped demos scoring at least this."
        ),
        seed: int = typer.Option(0, "--seed"),
        threads: int = typer.Option(1, "--threads", help="Threads for the before/after evaluations."),
        critic_balance: bool = typer.Option(
            True,
            "--critic-balance/--no-critic-balance",
            help="--target critic: the compiled critic's demos show both verdicts "
            "(a gold critique is added for a missing one).",
        ),
        critic_demos: bool = typer.Option(
            True,
            "--critic-demos/--no-critic-demos",
            help="--target critic: compile the critic's demos (off: keep its prompt, fit the calibrator only).",
        ),
        calibrate: bool = typer.Option(
            True,
            "--calibrate/--no-calibrate",
            help="--target critic: fit the calibrator of P(sufficient) on the harvested critiques and set the "
            "stop threshold from it.",
        ),
        train_offset: int = typer.Option(
            0,
            "--train-offset",
            help="Skip the first N seeded train questions (e.g. the ones a reranker was trained on, so the "
            "calibrator sees reranker scores of unseen questions).",
        ),
        freeze: list[str] | None = typer.Option(
            None,
            "--freeze",
            help="A role whose demos and instructions stay as in --program (repeatable), "
            "e.g. --freeze critic after `--target critic`.",
        ),
        program: str | None = PROGRAM,
        config: Path | None = o.Config,
        set_: list[str] | None = o.Set,
        retriever_mode: str | None = typer.Option(None, "--retriever-mode", help="dense, bm25 or hybrid."),
        retriever_set: list[str] | None = o.RetrieverSet,
        dataset: str = o.Dataset,
        data_dir: Path | None = o.DataDir,
        workspace: Path | None = o.Workspace,
        lm: str | None = o.LM,
        api_base: str | None = o.ApiBase,
        planner_lm: str | None = o.PlannerLM,
        critic_lm: str | None = o.CriticLM,
        generator_lm: str | None = o.GeneratorLM,
        proposer_lm: str | None = o.ProposerLM,
        lm_config: Path | None = o.LMConfigFile,
        no_cache: bool = o.NoCache,
        cache_dir: Path | None = o.CacheDir,
        tracking_uri: str | None = o.TrackingUri,
        experiment: str = EXPERIMENT,
    ) -> None:
        """Compile a system's prompts and demos (or its critic alone) and save the program."""
        from experiments import tracking
        from experiments.compile import CompileJob, check_sizes_early, compile_from_runtime

        try:
            job = CompileJob(
                system=system,
                optimizer=optimizer,
                target=target,
                metric=metric,
                name=name,
                optimizer_settings=_pairs(opt, "--opt"),
                metric_threshold=metric_threshold,
                seed=seed,
                threads=threads,
                critic_balance=critic_balance,
                critic_demos=critic_demos,
                calibrate=calibrate,
                freeze=tuple(freeze or ()),
            )
            check_sizes_early(job, n_train, n_val)
            lm_cfg = o.lm_config(
                lm_config,
                lm,
                api_base,
                planner_lm=planner_lm,
                critic_lm=critic_lm,
                generator_lm=generator_lm,
                proposer_lm=proposer_lm,
            )
            o.check_lms(lm_cfg, "proposer")  # a server that is down fails now, before any index or model loads
            rt = o.runtime(
                dataset,
                data_dir,
                workspace,
                lm_cfg,
                no_cache,
                cache_dir,
                {**o.parse_sets(retriever_set), **({"mode": retriever_mode} if retriever_mode else {})} or None,
            )
            tracking.configure(tracking_uri, rt.workspace, experiment)  # fail fast, before any LM work
            out = compile_from_runtime(
                rt,
                job,
                n_train=n_train,
                n_val=n_val,
                train_offset=train_offset,
                val_split=val_split,
                program_path=_program(program, rt),
                system_config=_system_config(config, set_),
                n_select=n_select,
            )
        except SharpError as exc:
            _fail(exc)
        typer.echo(f"program: {out.path}\nrun: {out.run_id}")
        for key in ("em", "f1", "all_gold", "lm_calls_per_q"):
            b, a = out.before.get(key), out.after.get(key)
            if b is not None and a is not None:
                typer.echo(f"  {key:>15}: {b:.3f} -> {a:.3f}")
        if out.critic:
            views = [(k, out.critic.get(k)) for k in ("zero_shot", "demos", "calibrator") if out.critic.get(k)]
            typer.echo(
                f"  critic, {views[0][1]['n_critiques']} held-out critiques of {out.critic['counts']['cases']} "
                f"(threshold now {out.critic['threshold']:g}):"
            )
            typer.echo("  " + " " * 16 + "".join(f"{name:>12}" for name, _ in views))
            for key in ("auroc", "brier", "ece", "verdict_accuracy", "over_trigger", "under_trigger"):
                cells = "".join(f"{'-' if v.get(key) is None else f'{v[key]:.3f}':>12}" for _, v in views)
                typer.echo(f"  {key:>16}{cells}")
        typer.echo(
            f"  compile cost: {out.cost['lm_calls']} LM calls, "
            f"{out.cost['prompt_tokens'] + out.cost['completion_tokens']} tokens, {out.cost['seconds']:.0f}s"
        )
        if "harvest" in out.cost:
            h = out.cost["harvest"]
            typer.echo(
                f"  harvesting critiques: {h['lm_calls']} LM calls, "
                f"{h['prompt_tokens'] + h['completion_tokens']} tokens"
            )
        typer.echo(f"export it with: sharp export {out.run_id} --name NAME")

    @app.command("tune")
    def tune_cmd(
        system: str = typer.Option("sharp", "--system", help="Only 'sharp' has a retry policy to tune."),
        trials: int = typer.Option(30, "--trials", help="Finished trials the study should have in all."),
        storage: str | None = typer.Option(
            None,
            "--storage",
            help="Where the study lives (default: sqlite in the workspace, one worker). Parallel workers: "
            "postgresql://USER:PASSWORD@HOST:PORT/DB, or journal:/PATH/study.journal on one machine.",
        ),
        study: str | None = typer.Option(None, "--study", help="Study name (default sharp-DATASET-OBJECTIVE)."),
        objective: str = typer.Option("f1", "--objective", help="f1, em, or f1-cost (F1 vs LM calls, Pareto)."),
        n_questions: int = typer.Option(30, "--n", help="Questions to tune on."),
        split: str = typer.Option("train", "--split", help="Split to tune on (keep dev for the final report)."),
        train_offset: int = typer.Option(0, "--train-offset", help="Skip the first N seeded questions of the split."),
        space: Path | None = typer.Option(None, "--space", help="YAML search space (SearchSpace keys)."),
        fix: list[str] | None = typer.Option(None, "--fix", help="Pin a parameter key=value (repeatable)."),
        verify: bool = typer.Option(False, "--verify", help="Run the best policy live and compare with replay."),
        seed: int = typer.Option(0, "--seed"),
        threads: int = typer.Option(1, "--threads", help="Threads for live recordings."),
        program: str | None = PROGRAM,
        config: Path | None = o.Config,
        set_: list[str] | None = o.Set,
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
        cache_dir: Path | None = o.CacheDir,
        tracking_uri: str | None = o.TrackingUri,
        experiment: str = EXPERIMENT,
    ) -> None:
        """Search threshold, retries, k schedule, evidence cap and retrieval mode with Optuna (replayed)."""
        from experiments import tracking
        from experiments.tune import TuneJob, default_storage, load_space, tune_from_runtime
        from optimize.storage import check_storage

        try:
            if system != "sharp":
                raise SharpError(f"tune searches SHARP's retry policy; {system!r} has none")
            job = TuneJob(
                objective=objective,
                n_trials=trials,
                storage=storage,
                study=study,
                seed=seed,
                threads=threads,
                space=load_space(space, _pairs(fix, "--fix")),
                verify=verify,
            )
            lm_cfg = o.lm_config(
                lm_config, lm, api_base, planner_lm=planner_lm, critic_lm=critic_lm, generator_lm=generator_lm
            )
            o.check_lms(lm_cfg)  # a server that is down fails now, before any index or model loads
            rt = o.runtime(dataset, data_dir, workspace, lm_cfg, no_cache, cache_dir)
            tracking.configure(tracking_uri, rt.workspace, experiment)  # fail fast, before any LM work
            check_storage(storage or default_storage(rt.workspace))
            out = tune_from_runtime(
                rt,
                job,
                n_questions=n_questions,
                split=split,
                program_path=_program(program, rt),
                system_config=_system_config(config, set_),
                offset=train_offset,
            )
        except SharpError as exc:
            _fail(exc)
        typer.echo(f"study {out.study}: {out.trials_run} trials run now; best {out.best_values} with")
        for key, value in out.best_params.items():
            typer.echo(f"  {key} = {value}")

        def figures(m: dict) -> str:
            return ", ".join(
                f"{k} {m[k]:.3f}" for k in ("em", "f1", "lm_calls_per_q") if isinstance(m.get(k), (int, float))
            )

        if out.best_metrics:
            typer.echo(f"best: {figures(out.best_metrics)}")
        if out.baseline:
            typer.echo("defaults (trial {}): ".format(out.baseline["number"]) + figures(out.baseline["metrics"]))
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

    @app.command("export")
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
        workspace: Path | None = o.Workspace,
        tracking_uri: str | None = o.TrackingUri,
        experiment: str = EXPERIMENT,
    ) -> None:
        """Register a compiled/tuned program as an MLflow model (loads with mlflow.pyfunc.load_model)."""
        from experiments import settings, tracking
        from experiments.export import export_run

        try:
            tracking.configure(tracking_uri, settings.workspace(workspace), experiment)
            out = export_run(run_id, name, index_dir=index_dir, include_index=include_index, bundle_code=bundle_code)
        except SharpError as exc:
            _fail(exc)
        typer.echo(f"registered {out.model_uri} (export run {out.run_id})")
        typer.echo(f"serve:  mlflow models serve -m {out.model_uri} --env-manager local -p 5001")
        typer.echo(f'ask:    sharp ask --program {out.model_uri} "..."')
