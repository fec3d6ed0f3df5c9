"""Tuning: search space, study resume in sqlite, replay-scored trials, MLflow parent + nested runs."""

from __future__ import annotations

import mlflow
import optuna
import pytest

import experiments.tune as et
from experiments.tune import TuneJob, load_space, run_tune
from optimize.tune import (
    SearchSpace,
    Tuner,
    apply_params,
    finished_trials,
    get_objective,
    open_study,
    recording_params,
    run_study,
)
from program.errors import ConfigError
from program.saved import read_program
from program.sharp import SharpConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

TOY_SPACE = SearchSpace(max_retries=(0, 1, 2, 3), k_start=(1, 2), k_step=(0, 1), evidence_cap=(4,), mode=("bm25",))


def test_params_become_a_config_and_retriever_overrides():
    config, retriever = apply_params(
        SharpConfig(),
        {"confidence_threshold": 0.8, "max_retries": 2, "k_start": 3, "k_step": 2, "evidence_cap": 2, "mode": "bm25"},
    )
    assert config.k_schedule == (3, 5, 7) and config.max_retries == 2 and config.confidence_threshold == 0.8
    assert config.evidence_cap == 3  # raised to the first k
    assert retriever == {"mode": "bm25"}
    rec = recording_params(
        {"confidence_threshold": 0.8, "max_retries": 1, "k_start": 3, "k_step": 2, "evidence_cap": 6, "mode": "bm25"},
        SearchSpace(),
    )
    assert rec == {"k_start": 3, "k_step": 2, "evidence_cap": 6, "mode": "bm25", "max_retries": 3}


def test_space_validation_and_files(tmp_path):
    with pytest.raises(ConfigError, match="unknown parameter"):
        SearchSpace.from_mapping({"fixed": {"treshold": 0.5}})
    with pytest.raises(ConfigError, match="mode"):
        SearchSpace.from_mapping({"mode": ["sparse"]})
    with pytest.raises(ConfigError, match="unknown objective"):
        get_objective("bleu")
    path = tmp_path / "space.yaml"
    path.write_text("k_start: [2, 4]\nfixed: {mode: bm25}\n")
    space = load_space(path, {"max_retries": 1})
    assert space.k_start == (2, 4) and space.fixed == {"mode": "bm25", "max_retries": 1}
    assert space.max_recorded_retries == 1


def fake_score(params):
    return {
        "f1": params["confidence_threshold"] - 0.1 * params["max_retries"],
        "em": 0.0,
        "lm_calls_per_q": 3.0 + params["max_retries"],
    }, False


def test_study_resumes_in_sqlite_after_an_interruption(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    objective = get_objective("f1")
    assert run_study(open_study(storage, "s", objective), Tuner(SearchSpace(), objective, fake_score), 3) == 3

    calls = []

    def interrupted(params):
        calls.append(params)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_score(params)

    with pytest.raises(KeyboardInterrupt):
        run_study(open_study(storage, "s", objective), Tuner(SearchSpace(), objective, interrupted), 10)
    study = open_study(storage, "s", objective)  # a new process would do exactly this
    assert finished_trials(study) == 4
    assert [t.state.name for t in study.trials][-1] == "FAIL"
    assert run_study(study, Tuner(SearchSpace(), objective, fake_score), 10) == 6
    assert finished_trials(open_study(storage, "s", objective)) == 10
    assert run_study(study, Tuner(SearchSpace(), objective, fake_score), 10) == 0  # already done
    with pytest.raises(ConfigError, match="another --study"):
        open_study(storage, "s", get_objective("f1-cost"))


def nested_runs(parent_id):
    exp = mlflow.get_run(parent_id).info.experiment_id
    return mlflow.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", output_format="list")


def artifact_paths(run_id, path=""):
    client = mlflow.tracking.MlflowClient()
    out = []
    for a in client.list_artifacts(run_id, path):
        out += artifact_paths(run_id, a.path) if a.is_dir else [a.path]
    return out


def test_tune_tracks_every_trial_and_saves_the_best_program(world, tmp_path, tracked):
    job = TuneJob(objective="f1", n_trials=8, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE, verify=True)
    out = run_tune(
        job,
        world.program(),
        world.examples(),
        retriever_for=lambda o: world.retriever(),
        workspace=tmp_path,
        study_name="toy",
    )
    assert out.trials_run == 8
    # retrieval settings: k_start x k_step = 4 at most; every other trial was replayed without the model
    assert 1 <= out.speedup["recordings"] <= 4 and out.speedup["live_seconds_estimate"] > 0
    assert out.verify["match"] == 1.0 and out.verify["live_f1"] == pytest.approx(out.best_values[0])
    saved = read_program(out.path)
    assert saved.meta["best_params"] == out.best_params and saved.retriever == {"mode": "bm25"}
    assert saved.config["confidence_threshold"] == pytest.approx(out.best_params["confidence_threshold"])

    parent = mlflow.get_run(out.run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["study"] == "toy"
    assert "best.confidence_threshold" in parent.data.params and "best.f1" in parent.data.metrics
    assert {"replay.speedup_total", "replay.record_seconds", "verify.match"} <= set(parent.data.metrics)
    trials = nested_runs(out.run_id)
    assert len(trials) == 8 and all(t.info.status == "FINISHED" for t in trials)
    assert all("f1" in t.data.metrics and "confidence_threshold" in t.data.params for t in trials)
    files = artifact_paths(out.run_id)
    assert {"plots/history.png", "plots/param_importances.png", "tune_report.json", "program/toy.json"} <= set(files)

    # resuming to 10 trials runs 2 more, reusing the recordings on disk
    job.n_trials, job.verify = 10, False
    again = run_tune(
        job,
        world.program(),
        world.examples(),
        retriever_for=lambda o: world.retriever(),
        workspace=tmp_path,
        study_name="toy",
    )
    assert again.trials_run == 2 and len(nested_runs(again.run_id)) == 2
    assert again.speedup["recordings"] == 0  # every retrieval setting it met was recorded before


def test_multi_objective_plots_the_pareto_front(world, tmp_path, tracked):
    job = TuneJob(objective="f1-cost", n_trials=6, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE)
    out = run_tune(
        job,
        world.program(),
        world.examples(),
        retriever_for=lambda o: world.retriever(),
        workspace=tmp_path,
        study_name="pareto",
    )
    assert len(out.best_values) == 2
    files = artifact_paths(out.run_id)
    assert {"plots/pareto_front.png", "plots/history_f1.png", "plots/history_lm_calls_per_q.png"} <= set(files)
    front = optuna.load_study(study_name="pareto", storage=job.storage).best_trials
    assert max(t.values[0] for t in front) == pytest.approx(out.best_values[0])


def test_interrupted_study_marks_the_run_and_resumes(world, tmp_path, tracked, monkeypatch):
    real = et.replay.score
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(et.replay, "score", interrupted)
    job = TuneJob(n_trials=5, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE)
    kwargs = dict(retriever_for=lambda o: world.retriever(), workspace=tmp_path, study_name="cut")
    with pytest.raises(KeyboardInterrupt):
        run_tune(job, world.program(), world.examples(), **kwargs)
    (parent,) = [r for r in tracked.runs() if r.data.tags.get("kind") == "tune"]
    assert parent.info.status in ("KILLED", "FAILED")  # never left RUNNING
    assert len(nested_runs(parent.info.run_id)) == 2
    monkeypatch.setattr(et.replay, "score", real)
    out = run_tune(job, world.program(), world.examples(), **kwargs)
    assert out.trials_run == 3 and mlflow.get_run(out.run_id).info.status == "FINISHED"


def test_only_sharp_can_be_tuned(world, tmp_path):
    from experiments.tune import ReplayScorer
    from program.baselines import VanillaRAG

    with pytest.raises(ConfigError, match="retry loop"):
        ReplayScorer(VanillaRAG(world.retriever()), world.examples(), TOY_SPACE, lambda o: None, tmp_path)


def test_the_starting_config_is_the_first_trial_when_it_lies_in_the_space():
    from optimize.tune import baseline_trial, enqueue_baseline, in_space, params_of

    default = params_of(SharpConfig(), "hybrid")
    assert default == {
        "confidence_threshold": 0.35,
        "max_retries": 2,
        "k_start": 3,
        "k_step": 2,
        "evidence_cap": 5,
        "mode": "hybrid",
    }
    assert apply_params(SharpConfig(), default)[0] == SharpConfig()  # the point reproduces the config
    assert params_of(SharpConfig(k_schedule=(1, 2, 2)), "bm25") is None  # not arithmetic
    assert in_space(default, SearchSpace()) and not in_space(default, SearchSpace(mode=("bm25",)))
    assert in_space(default, SearchSpace(mode=("bm25",), fixed={"mode": "hybrid"}))

    objective = get_objective("f1")
    study = optuna.create_study(direction="maximize")
    assert enqueue_baseline(study, SearchSpace(), default)
    seen = []
    run_study(study, Tuner(SearchSpace(), objective, lambda p: (seen.append(p), fake_score(p))[1]), 3)
    assert seen[0] == default and seen[1] != default
    assert baseline_trial(study).number == 0
    assert not enqueue_baseline(study, SearchSpace(), default)  # a study with trials is not re-seeded
    fresh = optuna.create_study(direction="maximize")
    assert not enqueue_baseline(fresh, SearchSpace(evidence_cap=(8, 10)), default) and not fresh.trials


def test_tune_reports_the_defaults_next_to_the_best(world, tmp_path, tracked):
    from experiments.compile import SaveInfo

    start = SharpConfig(k_schedule=(1, 2, 3, 4), evidence_cap=4, max_retries=3, confidence_threshold=0.7)
    job = TuneJob(objective="f1", n_trials=4, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE)
    out = run_tune(
        job,
        world.program(start),
        world.examples(),
        retriever_for=lambda o: world.retriever(),
        workspace=tmp_path,
        study_name="with-defaults",
        save=SaveInfo(retriever={"mode": "bm25"}),
    )
    assert out.baseline["number"] == 0
    assert out.baseline["params"] == {
        "confidence_threshold": 0.7,
        "max_retries": 3,
        "k_start": 1,
        "k_step": 1,
        "evidence_cap": 4,
        "mode": "bm25",
    }
    assert "f1" in out.baseline["metrics"] and out.best_values[0] >= out.baseline["metrics"]["f1"]
    assert out.best_metrics["f1"] == pytest.approx(out.best_values[0]) and "lm_calls_per_q" in out.best_metrics
    assert mlflow.get_run(out.run_id).data.metrics["default.f1"] == pytest.approx(out.baseline["metrics"]["f1"])


def test_a_tie_on_the_objective_goes_to_the_policy_with_fewer_lm_calls():
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from optimize.tune import best_trial

    study = optuna.create_study(direction="maximize")
    dist = {"confidence_threshold": FloatDistribution(0.05, 0.95)}
    for value, calls, thr in [(0.41, 3.08, 0.35), (0.30, 1.0, 0.9), (0.41, 2.0, 0.6), (0.41, 2.0, 0.7)]:
        study.add_trial(
            create_trial(
                value=value,
                params={"confidence_threshold": thr},
                distributions=dist,
                user_attrs={"metrics": {"f1": value, "lm_calls_per_q": calls}},
            )
        )
    assert study.best_trial.number == 0  # Optuna alone keeps the first of the tied trials
    best = best_trial(study, get_objective("f1"))
    assert best.number == 2  # equal F1, fewer calls; the earlier of two equal
    assert best.params["confidence_threshold"] == 0.6
