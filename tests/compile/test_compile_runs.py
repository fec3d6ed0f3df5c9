"""`sharp compile` end to end with scripted LMs: one MLflow run, a saved program that loads back."""

from __future__ import annotations

import json

import mlflow
import pytest

import experiments.compile as ec
from experiments.compile import CompileJob, SaveInfo, run_compile
from experiments.export import load_saved
from optimize.optimizers import TrainSetTooSmallError
from program.errors import ConfigError
from program.saved import read_program


def artifacts(run_id, path=""):
    client = mlflow.tracking.MlflowClient()
    out = []
    for a in client.list_artifacts(run_id, path):
        out += artifacts(run_id, a.path) if a.is_dir else [a.path]
    return out


def strip(trace):
    return [{k: v for k, v in s.items() if k != "seconds"} for s in trace]


def compile_toy(world, tmp_path, job=None, train=slice(0, 6), val=slice(3, 9), **kw):
    examples = world.examples()
    return run_compile(
        job or CompileJob(optimizer="bootstrap"),
        world.program(),
        examples[train],
        examples[val],
        out_dir=tmp_path / "compile",
        programs_dir=tmp_path / "programs",
        save=SaveInfo(
            retriever={"mode": "bm25"},
            lm={"default": {"model": "openai/x"}},
            index_manifest={"corpus": "toy"},
            meta={"dataset": "toy"},
        ),
        **kw,
    )


def test_bootstrap_compile_saves_a_program_that_answers_identically(world, tmp_path, tracked):
    out = compile_toy(world, tmp_path)
    saved = read_program(out.path)
    assert saved.system == "sharp" and saved.meta["run_id"] == out.run_id and saved.meta["optimizer"] == "bootstrap"
    assert saved.retriever == {"mode": "bm25"} and saved.index_manifest == {"corpus": "toy"}
    loaded = load_saved(saved, world.retriever())
    world.assign(loaded)
    compiled = out.module  # the program as compiled, before it was saved
    assert any(p.demos for _, p in loaded.named_predictors())
    for case in world.cases:
        a, b = loaded(question=case.question), compiled(question=case.question)
        assert (a.answer, a.stop_reason, a.retries) == (b.answer, b.stop_reason, b.retries)
        assert strip(a.trace) == strip(b.trace)
    assert out.after["f1"] is not None and out.cost["lm_calls"] > 0

    run = mlflow.get_run(out.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["kind"] == "compile"
    p, m = run.data.params, run.data.metrics
    assert p["optimizer"] == "bootstrap" and p["n_train"] == "6" and p["n_val"] == "6" and len(p["data_hash"]) == 16
    assert p["opt_used.max_bootstrapped_demos"] == "2" and p["config.evidence_cap"] == "4"
    assert {
        "before.f1",
        "after.f1",
        "before.em",
        "gain.f1",
        "compile.lm_calls",
        "compile.seconds",
        "compile.by_role.critic.lm_calls",
    } <= set(m)
    files = artifacts(out.run_id)
    assert f"program/{out.path.name}" in files
    assert {
        "prompts.md",
        "prompts.json",
        "optimizer.json",
        "lm_config.json",
        "before.questions.json",
        "after.questions.json",
    } <= set(files)
    prompts = json.loads(mlflow.artifacts.load_text(f"{run.info.artifact_uri}/prompts.json"))
    assert set(prompts) == {"planner", "critic", "bridge", "generator"}


def test_critic_target_compiles_the_critic_and_installs_it(world, tmp_path, tracked):
    out = compile_toy(world, tmp_path, CompileJob(optimizer="bootstrap", target="critic"), train=slice(0, 9))
    assert out.critic["counts"]["cases"] > 0 and out.critic["n_train_cases"] > 0
    assert 0 <= out.critic["demos"]["score"] <= 1 and out.critic["zero_shot"]["brier"] is not None
    saved = read_program(out.path)
    assert saved.state["critic"]["demos"] and not saved.state["generator"]["demos"]
    m = mlflow.get_run(out.run_id).data.metrics
    assert {
        "critic.zero_shot.brier",
        "critic.demos.score",
        "critic.calibrator.brier",
        "critic.harvest.cases",
        "compile.by_role.critic.lm_calls",
    } <= set(m)
    assert "compile.by_role.generator.lm_calls" not in m  # only the critic was compiled
    assert m["compile.harvest.lm_calls"] > 0  # the runs that produced the critique states are counted
    params = mlflow.get_run(out.run_id).data.params
    assert params["critic_balance"] == "True" and "critic.balanced_with" in params
    # the calibrator ships in the program's config, and its threshold is the program's stop threshold
    cal = saved.config["calibrator"]
    assert cal["features"] and len(cal["weights"]) == len(cal["features"]) and cal["fitted_on"]["critic_demos"]
    assert saved.config["confidence_threshold"] == out.critic["threshold"] == float(params["critic.threshold"])
    assert cal["fitted_on"]["threshold"] == out.critic["threshold"]
    verdicts = {d.get("verdict") for d in saved.state["critic"]["demos"]}
    labels = {c for c in ("sufficient", "insufficient") if out.critic["counts"][c]}
    assert labels <= verdicts  # the saved critic's demos show every verdict the train cases have


def test_critic_target_without_demos_fits_only_the_calibrator(world, tmp_path, tracked):
    job = CompileJob(optimizer="bootstrap", target="critic", critic_demos=False)
    out = compile_toy(world, tmp_path, job, train=slice(0, 9))
    saved = read_program(out.path)
    assert not saved.state["critic"]["demos"]  # the critic's prompt is as it was
    assert out.critic["demos"] is None and out.critic["calibrator"]["n_critiques"] > 0
    assert out.cost["lm_calls"] == 0 and out.cost["harvest"]["lm_calls"] > 0  # only the harvest called the LM
    assert saved.config["calibrator"]["fitted_on"]["critic_demos"] is False
    # the installed calibrator drives the program: its critiques carry the calibrated probability
    pred = out.module(question=world.examples()[0].question)
    critiques = [s for s in pred.trace if s["role"] == "critic"]
    assert critiques and all(0.0 <= s["p_calibrated"] <= 1.0 for s in critiques)
    assert critiques[-1]["critic_stop"] == (critiques[-1]["p_calibrated"] >= out.critic["threshold"])


def test_too_small_train_split_fails_before_any_run(world, tmp_path, tracked):
    with pytest.raises(TrainSetTooSmallError, match="at least 4"):
        compile_toy(world, tmp_path, CompileJob(optimizer="bootstrap-rs"), train=slice(0, 3))
    with pytest.raises(ConfigError, match="validation split is empty"):
        compile_toy(world, tmp_path, val=slice(0, 0))
    with pytest.raises(ConfigError, match="unknown metric"):
        CompileJob(metric="rouge")
    assert tracked.runs() == []


def test_a_terminated_command_ends_its_run_killed_not_running(tracked):
    import os
    import signal

    from experiments import tracking
    from experiments.cli import interrupt_on_sigterm

    previous = signal.getsignal(signal.SIGTERM)
    try:
        interrupt_on_sigterm()
        with pytest.raises(KeyboardInterrupt, match="signal"), tracking.run("terminated"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    (run,) = tracked.runs()
    assert run.info.status == "KILLED"


@pytest.mark.parametrize("error,status", [(KeyboardInterrupt, "KILLED"), (RuntimeError, "FAILED")])
def test_interrupted_compile_is_marked_and_resumes(world, tmp_path, tracked, monkeypatch, error, status):
    real = ec.compile_program

    def boom(*args, **kwargs):
        raise error("interrupted")

    monkeypatch.setattr(ec, "compile_program", boom)
    with pytest.raises(error):
        compile_toy(world, tmp_path)
    (run,) = tracked.runs()
    assert run.info.status == status  # never left RUNNING
    before_files = list((tmp_path / "compile").rglob("before-*.jsonl"))
    assert len(before_files) == 1 and len(before_files[0].read_text().splitlines()) == 6

    monkeypatch.setattr(ec, "compile_program", real)
    lms = world.lms()
    orig_program = world.program

    def program_with_counted_lms(config=None, retriever=None):
        prog = orig_program(config, retriever)
        world.assign(prog, lms)
        return prog

    monkeypatch.setattr(world, "program", program_with_counted_lms)
    out = compile_toy(world, tmp_path)
    assert mlflow.get_run(out.run_id).info.status == "FINISHED"
    assert len(before_files[0].read_text().splitlines()) == 6  # the finished evaluation was reused
    assert mlflow.get_run(out.run_id).data.metrics["before.f1"] == pytest.approx(out.before["f1"])
