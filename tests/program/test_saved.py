"""Saved programs: JSON only, round trip, tamper and version refusal."""

from __future__ import annotations

import json

import dspy
import pytest
from doubles import ScriptedLM, assign

import program.version
from program.errors import ProgramFileError
from program.serving.saved import load_into, read_program, save_program, without_lms
from program.sharp.gate import AnswerCalibrator
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig


def compiled(retriever):
    gate = AnswerCalibrator.make(("lp_mean", "in_evidence"), (-0.5, 0.5), (0.3, 0.5), (1.2, 0.8), -0.1, {"cases": 40})
    prog = SharpRAG(retriever, SharpConfig(accept_threshold=0.55, k_schedule=(2, 4), gate=gate))
    prog.critic.signature = prog.critic.signature.with_instructions("Only say supported when both hops are there.")
    prog.generator.demos = [dspy.Example(question="q?", evidence="[1] T: t", answer="a", supporting_passages=[1])]
    assign(
        prog,
        {
            "planner": ScriptedLM("planner", []),
            "critic": ScriptedLM("critic", []),
            "generator": ScriptedLM("generator", []),
            "composer": ScriptedLM("generator", []),
        },
    )
    return prog


def test_round_trip_rebuilds_config_demos_and_instructions(tmp_path, retriever):
    path = save_program(tmp_path / "p.json", compiled(retriever), "sharp", retriever={"mode": "hybrid"})
    text = path.read_text()
    assert "ScriptedLM" not in text and "dummy" not in text  # no LM object is saved
    saved = read_program(path)
    assert saved.system == "sharp" and saved.retriever == {"mode": "hybrid"}
    module = load_into(saved, retriever)
    assert module.config.accept_threshold == 0.55 and module.config.k_schedule == (2, 4)
    assert module.config.gate == compiled(retriever).config.gate  # the answer critic's numbers, as saved
    assert module.critic.signature.instructions.startswith("Only say supported")
    assert module.generator.demos[0]["answer"] == "a"


def test_without_lms_empties_every_lm_slot_and_gives_each_predictor_one():
    state = {
        "planner.predict": {"signature": {}, "demos": [{"question": "q", "lm": "kept?"}], "lm": {"model": "x"}},
        "critic.predict": {"signature": {}, "demos": []},  # saved without a slot: dspy's loader needs one
        "config": {"k": 2},
    }
    out = without_lms(state)
    assert out["planner.predict"]["lm"] is None and out["critic.predict"]["lm"] is None
    assert out["planner.predict"]["demos"][0]["lm"] is None  # the walk goes into lists too
    assert out["config"] == {"k": 2} and "lm" not in out["config"]  # not a predictor state: no slot added
    assert state["planner.predict"]["lm"] == {"model": "x"}  # the input is not changed
    assert without_lms(out) == out


def test_tampered_file_is_refused(tmp_path, retriever):
    path = save_program(tmp_path / "p.json", compiled(retriever), "sharp")
    body = json.loads(path.read_text())
    body["config"]["max_repairs"] = 0
    path.write_text(json.dumps(body))
    with pytest.raises(ProgramFileError, match="modified after it was saved"):
        read_program(path)


def test_other_code_version_is_refused(tmp_path, retriever, monkeypatch):
    path = save_program(tmp_path / "p.json", compiled(retriever), "sharp")
    monkeypatch.setattr(program.version, "__version__", "9.9.9")
    with pytest.raises(ProgramFileError, match="code version 0.2.0, this is 9.9.9"):
        read_program(path)


@pytest.mark.parametrize("content,words", [("not json", "not a readable program"), ('{"format": "x"}', "not a SHARP")])
def test_unreadable_files(tmp_path, content, words):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ProgramFileError, match=words):
        read_program(path)
    with pytest.raises(ProgramFileError, match="no program file"):
        read_program(tmp_path / "missing.json")


def test_two_writers_saving_one_program_at_once_both_succeed(tmp_path, retriever):
    import threading

    prog, errors = compiled(retriever), []

    def save():
        try:
            for _ in range(20):
                save_program(tmp_path / "p.json", prog, "sharp")
        except OSError as exc:  # a shared temp name: one writer's rename finds the other's file gone
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and read_program(tmp_path / "p.json").system == "sharp"
    assert not list(tmp_path.glob("*.tmp"))
