"""`sharp ship`: a compiled program copied into a folder of shipped defaults, with its manifest entry."""

from __future__ import annotations

import json

import pytest
from doubles import ScriptedLM, assign
from typer.testing import CliRunner

from experiments.cli import app
from experiments.ship import ship_program
from program import shipped
from program.errors import ProgramFileError
from program.saved import read_program, save_program
from program.sharp import SharpConfig, SharpRAG

LM = {"default": {"model": "local/qwen2.5-coder-1.5b"}}


def saved(tmp_path, retriever, *, lm=LM, corpus="c0ffee"):
    from program.calibration import AnswerCalibrator

    gate = AnswerCalibrator.make(
        ("lp_mean",), (0.0,), (1.0,), (1.0,), 0.0, {"dataset": "hotpotqa", "train_offset": 478}
    )
    prog = SharpRAG(retriever, SharpConfig(accept_threshold=0.6, gate=gate))
    assign(prog, {r: ScriptedLM(r, []) for r in ("planner", "critic", "generator", "composer")})
    manifest = {"corpus_sha256": corpus} if corpus else {}
    meta = {"dataset": "hotpotqa", "index_dir": "/home/someone/ws/indexes/hotpotqa", "storage": "sqlite:///x.db"}
    return save_program(tmp_path / "tuned.json", prog, "sharp", lm=lm, index_manifest=manifest, meta=meta)


def test_ship_copies_the_program_drops_machine_paths_and_records_it(tmp_path, retriever):
    folder = tmp_path / "compiled"
    out = ship_program(
        saved(tmp_path, retriever), "sharp-x", commands=["sharp tune ..."], figures={"em": 0.4}, folder=folder
    )
    copy = read_program(out)  # the copy's own checksum holds
    assert copy.config["accept_threshold"] == 0.6 and copy.config["gate"]["fitted_on"]["train_offset"] == 478
    assert "index_dir" not in copy.meta and "storage" not in copy.meta and copy.meta["dataset"] == "hotpotqa"
    entry = json.loads((folder / shipped.MANIFEST).read_text())["programs"]["sharp-x"]
    assert entry["lm"] == "local/qwen2.5-coder-1.5b" and entry["corpus_sha256"] == "c0ffee"
    assert entry["commands"] == ["sharp tune ..."] and entry["figures"] == {"em": 0.4}
    assert entry["compiled_on"] == "hotpotqa train, after the first 478 seeded questions"  # read from the gate
    found = shipped.default_program("c0ffee", "local/qwen2.5-coder-1.5b", folder)
    assert found is not None and found.path == out  # what the commands then run by default


def test_ship_refuses_a_program_without_corpus_model_or_checksum(tmp_path, retriever):
    with pytest.raises(ProgramFileError, match="records no index corpus"):
        ship_program(saved(tmp_path, retriever, corpus=None), "x", folder=tmp_path / "c")
    with pytest.raises(ProgramFileError, match="records no model"):
        ship_program(saved(tmp_path, retriever, lm={}), "x", folder=tmp_path / "c")
    mixed = {"default": {"model": "local/a"}, "critic": {"model": "openai/b"}}
    with pytest.raises(ProgramFileError, match="several models"):
        ship_program(saved(tmp_path, retriever, lm=mixed), "x", folder=tmp_path / "c")
    path = saved(tmp_path, retriever)
    path.write_text(path.read_text().replace("0.6", "0.7"))
    with pytest.raises(ProgramFileError):
        ship_program(path, "x", folder=tmp_path / "c")
    assert not (tmp_path / "c").exists()  # nothing written on refusal


def test_ship_command_errors_name_the_file(tmp_path):
    res = CliRunner().invoke(app, ["ship", str(tmp_path / "missing.json"), "--name", "x"])
    assert res.exit_code != 0 and "missing.json" in res.output and "Traceback" not in res.output
