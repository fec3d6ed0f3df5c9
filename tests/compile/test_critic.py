"""`sharp compile --target critic` end to end on the toy world: record the train and held-out questions, fit
the answer critic's gate and judge on the train drafts, install them with their threshold, report before and
after by replay of the same recording (no LM call after it), and log the report and its pictures."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from experiments.jobs.compile_job import CompileJob, SaveInfo, run_compile
from optimize import recording, replay
from program.errors import ConfigError
from program.serving.saved import read_program
from program.sharp.policy import SharpConfig
from tests.compile.test_compile_runs import artifacts


def splits(world):
    """Train: the toy questions twice over (under other ids: enough drafts for a judge); held out: once."""
    examples = world.examples()
    train = [ex.copy(id=f"{ex.id}-{k}") for k in range(2) for ex in examples]
    return train, examples


def compile_critic(world, tmp_path, job, config=None):
    train, held = splits(world)
    lms = world.lms()
    student = world.program(config)
    world.assign(student, lms)
    out = run_compile(
        job,
        student,
        train,
        held,
        out_dir=tmp_path / "compile",
        programs_dir=tmp_path / "programs",
        save=SaveInfo(retriever={"mode": "bm25"}, meta={"dataset": "toy"}),
    )
    return out, lms, student


def test_the_critic_target_fits_gate_and_judge_installs_them_and_reports_by_replay(world, tmp_path, tracked):
    out, lms, student = compile_critic(world, tmp_path, CompileJob(target="critic", name="toy-critic"))
    saved = read_program(out.path)
    cfg = SharpConfig.from_mapping(saved.config)
    assert cfg.gate is not None and not cfg.gate.needs_critic
    assert cfg.judge is not None and cfg.judge.needs_critic  # the recording was critiqued
    assert cfg.accept_threshold == out.critic["threshold"] == cfg.gate.fitted_on["threshold"]
    path = Path(out.critic["recording"])
    assert cfg.gate.fitted_on["role"] == "gate" and cfg.gate.fitted_on["recording"] == path.name
    assert cfg.gate.fitted_on["held_out"]["auroc"] == pytest.approx(out.critic["report"]["gate"]["auroc"], abs=1e-4)
    assert out.critic["gate_features"] == list(cfg.gate.features)
    assert {k: v for k, v in saved.config.items() if k not in ("gate", "judge", "accept_threshold")} == {
        k: v for k, v in student.config.saved().items() if k not in ("gate", "judge", "accept_threshold")
    }  # nothing else of the program changed

    # every LM call was the recording's: before and after are replayed, not run
    assert sum(lm.calls for lm in lms.values()) == out.cost["recording"]["lm_calls"] > 0
    assert out.cost["lm_calls"] == 0
    train, held = splits(world)
    fresh = world.lms()
    again = world.program()
    world.assign(again, fresh)
    records = recording.record(again, [*train, *held], path, focus_when="flagged")  # read back: nothing left
    assert all(lm.calls == 0 for lm in fresh.values())
    before, after = replay.score(records, held, student.config), replay.score(records, held, cfg)
    for key in ("em", "f1", "lm_calls_per_q"):
        assert out.before[key] == pytest.approx(before.metrics[key]) and out.after[key] == pytest.approx(
            after.metrics[key]
        )

    run = mlflow.get_run(out.run_id)
    assert run.info.status == "FINISHED" and run.data.params["target"] == "critic"
    assert run.data.params["critic.threshold"] == str(out.critic["threshold"])
    assert run.data.params["critic_reads"] == "True"
    assert {"critic.gate.auroc", "critic.gate.brier", "critic.judge.auroc", "critic.critic_alone.auroc",
            "before.f1", "after.f1"} <= set(run.data.metrics)  # fmt: skip
    files = set(artifacts(out.run_id))
    assert {"critic_report.json", "critic/roc.png", "critic/reliability.png", "program/toy-critic.json"} <= files
    report = json.loads(mlflow.artifacts.load_text(f"{run.info.artifact_uri}/critic_report.json"))
    gate = report["report"]["gate"]
    assert gate["auroc_ci"][0] <= gate["auroc"] <= gate["auroc_ci"][1]
    assert report["report"]["critic_problems"] > 0  # the toy world's garbled critique, counted
    assert report["report"]["fit"]["drafts"] > 20 and report["judge_features"]

    # the compiled program judges its rounds with what was fitted
    pred = out.module(question=held[0].question)
    assert {s["source"] for s in pred.trace if s["role"] == "judgement"} <= {"gate", "judge"}


def test_a_recording_without_critiques_fits_the_gate_alone(world, tmp_path, tracked):
    job = CompileJob(target="critic", name="gate-only", critic_reads=False)
    out, _, _ = compile_critic(world, tmp_path, job, world.small.replace(ask_critic="off"))
    cfg = SharpConfig.from_mapping(read_program(out.path).config)
    assert cfg.gate is not None and cfg.judge is None and out.critic["judge_features"] is None
    assert "judge" not in out.critic["report"] and out.critic["report"]["fit"]["critiqued"] == 0
    # the second compile on the same recording records nothing
    job2 = CompileJob(target="critic", name="gate-again", critic_reads=False, recording=Path(out.critic["recording"]))
    again, lms, _ = compile_critic(world, tmp_path, job2, world.small.replace(ask_critic="off"))
    assert all(lm.calls == 0 for lm in lms.values()) and again.critic["threshold"] == out.critic["threshold"]


def test_a_refit_without_a_judge_drops_the_programs_old_judge(world, tmp_path, tracked):
    """Too few critiqued train drafts for a judge: the compiled program has none, not the one it came with
    (a judge fitted beside another gate, on other drafts)."""
    from program.sharp.gate import AnswerCalibrator

    old = AnswerCalibrator.make(("lp_mean", "p_supported"), (0.0, 0.0), (1.0, 1.0), (1.0, 1.0), 0.0, {"dataset": "old"})
    train, held = splits(world)
    out = run_compile(
        CompileJob(target="critic", name="refit"),
        world.program(world.small.replace(judge=old)),
        train[:6],
        held[:3],
        out_dir=tmp_path / "compile",
        programs_dir=tmp_path / "programs",
    )
    assert out.critic["judge_features"] is None and out.critic["report"]["fit"]["critiqued"] < 20
    assert read_program(out.path).config["judge"] is None and out.module.config.judge is None


def test_a_critic_the_recording_does_not_read_is_refused_before_anything_runs(world, tmp_path, tracked):
    job = CompileJob(target="critic", name="refused", critic_reads=False)
    with pytest.raises(ConfigError, match="the critic reads no recorded round.*critic='band'.*set ask_critic=off"):
        compile_critic(world, tmp_path, job, world.small.replace(ask_critic="band"))
    assert tracked.runs() == []


def test_only_sharp_has_an_answer_critic_and_it_needs_train_questions(world, tmp_path, tracked):
    from program.systems.vanilla import VanillaRAG

    train, held = splits(world)
    kw = dict(out_dir=tmp_path / "c", programs_dir=tmp_path / "p")
    with pytest.raises(ConfigError, match="at least 2 questions"):
        run_compile(CompileJob(target="critic"), world.program(), train[:1], held, **kw)
    with pytest.raises(ConfigError, match="no answer critic to compile"):
        run_compile(CompileJob(target="critic", system="vanilla"), VanillaRAG(world.retriever()), train, held, **kw)
    with pytest.raises(ConfigError, match="--freeze"):
        CompileJob(target="critic", freeze=("generator",))
