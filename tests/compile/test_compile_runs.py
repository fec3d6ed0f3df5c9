"""`sharp compile` end to end with scripted LMs: one MLflow run, a saved program that loads back."""

from __future__ import annotations

import json

import mlflow
import pytest

import experiments.jobs.compile_job as ec
from experiments.export import load_saved
from experiments.jobs.compile_job import CompileJob, SaveInfo, run_compile
from optimize.optimizers import TrainSetTooSmallError
from program.errors import ConfigError
from program.serving.saved import read_program


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
    assert p["opt_used.max_bootstrapped_demos"] == "2" and p["config.evidence_cap"] == "3"
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
    assert set(prompts) == {"planner", "critic", "generator", "composer", "focuser", "hop_planner"}


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
