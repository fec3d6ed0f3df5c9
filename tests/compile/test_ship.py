"""`sharp ship`: a compiled program copied into a folder of shipped defaults, with its manifest entry."""

from __future__ import annotations

import json

import pytest
from doubles import ScriptedLM, assign
from typer.testing import CliRunner

from experiments.cli import app
from experiments.jobs.ship import ship_program
from program.errors import ProgramFileError
from program.serving import shipped
from program.serving.saved import read_program, save_program
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig

LM = {"default": {"model": "local/qwen2.5-coder-1.5b"}}


def saved(tmp_path, retriever, *, lm=LM, corpus="c0ffee"):
    from program.sharp.gate import AnswerCalibrator

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


class _ShipRuntime:
    """What ship_check uses of a Runtime, over the toy world: programs loaded with rule LMs, its passages."""

    def __init__(self, world, workspace):
        self.world, self.workspace = world, workspace

    def load_program(self, path):
        from program.serving.saved import load_into

        module = load_into(read_program(path), self.world.retriever())
        self.world.assign(module)
        return module, None

    def passages(self):
        from program.sharp.rounds import lookup_in

        return lookup_in({p.id: p for p in self.world.corpus})


def test_a_program_that_scores_below_the_shipped_one_on_held_out_questions_is_refused_by_how_much(
    world, tmp_path, monkeypatch
):
    """The shipped program answers with the retrieval repair; the candidate repairs nothing: on the same
    held-out questions (each replayed over a recording of its own reading) it scores lower, and is refused
    unless forced. The recording is named relative to the working directory (MANIFEST.json keeps it)."""
    from experiments.jobs.ship import ShipRefusedError, refuse_if_worse, ship_check

    def program_file(name, **config):
        prog = world.program(world.small.replace(ask_critic="off", **config))
        return save_program(tmp_path / f"{name}.json", prog, "sharp", lm=LM, index_manifest={"corpus_sha256": "toy"})

    shipped_file = program_file("shipped", accept_threshold=0.99)
    worse = program_file("worse", max_repairs=0)
    rt = _ShipRuntime(world, tmp_path)
    monkeypatch.chdir(tmp_path)
    check = ship_check(rt, worse, shipped_file, world.examples())
    assert check["questions"] == len(world.examples()) and check["delta_em"] < 0
    assert check["new"]["recording"].startswith("recordings/ship-"), check["new"]["recording"]
    assert check["new"]["em"] < check["shipped"]["em"] and check["new"]["lm_calls_per_q"] == 1.0
    # the two read alike (their policies differ): one recording, named by what its rounds read, serves both
    assert check["new"]["recording"] == check["shipped"]["recording"]
    with pytest.raises(ShipRefusedError, match=r"below the shipped one's .*--force"):
        refuse_if_worse(check, "sharp-toy", force=False)
    refuse_if_worse(check, "sharp-toy", force=True)  # forced: shipped anyway
    halves = {ex.id: ("a" if i % 2 else "b") for i, ex in enumerate(world.examples())}
    grouped = ship_check(rt, worse, shipped_file, world.examples(), groups=halves)["by group"]
    assert sorted(grouped) == ["a", "b"]
    assert sum(g["questions"] for g in grouped.values()) == check["questions"]
    weighted = sum(g["em new"] * g["questions"] for g in grouped.values()) / check["questions"]
    assert weighted == pytest.approx(check["new"]["em"], abs=0.01)
    same = ship_check(rt, shipped_file, shipped_file, world.examples())
    assert same["delta_em"] == 0.0 and "by group" not in same
    refuse_if_worse(same, "sharp-toy", force=False)  # not below: shipped


def test_the_ship_check_reads_only_the_rounds_each_program_reaches(world, tmp_path, monkeypatch):
    """A build's recording also holds rounds of repairs the shipped program never runs (the chain the new program
    was built with, read with its own hop planner): the shipped program is replayed over the same recording, its
    reading checked on the rounds it reaches only. A round it reaches, read otherwise, is still refused."""
    import json

    from experiments.jobs.ship import score_on
    from optimize.recording import reading

    prog = world.program(world.small.replace(ask_critic="off", max_repairs=0))
    where = tmp_path / "recording.jsonl"
    first = score_on(_ShipRuntime(world, tmp_path), prog, world.examples(), where)
    records = [json.loads(line) for line in where.read_text().splitlines()]
    for rec in records:  # a chain round another program read: this one never chains
        rec["rounds"].append({**rec["rounds"][0], "action": "chain", "reading": "read-by-another-program"})
    where.write_text("".join(json.dumps(r) + "\n" for r in records))
    again = score_on(_ShipRuntime(world, tmp_path), prog, world.examples(), where)
    assert again.metrics["em"] == first.metrics["em"]
    for rec in records:  # the draft, which it reaches, read by another program: read again, not taken
        rec["rounds"][0]["reading"] = "read-by-another-program"
    where.write_text("".join(json.dumps(r) + "\n" for r in records))
    score_on(_ShipRuntime(world, tmp_path), prog, world.examples(), where)
    latest = {r["id"]: r for r in map(json.loads, where.read_text().splitlines())}
    assert {rnd["reading"] for r in latest.values() for rnd in r["rounds"] if rnd["action"] == "draft"} == {
        reading(prog, "draft")
    }


def test_replacing_a_shipped_program_asks_for_the_held_out_questions_or_force(tmp_path, retriever, monkeypatch):
    folder = tmp_path / "compiled"
    ship_program(saved(tmp_path, retriever), "sharp-x", folder=folder)
    monkeypatch.setattr(shipped, "COMPILED_DIR", folder)
    res = CliRunner().invoke(app, ["ship", str(saved(tmp_path, retriever)), "--name", "sharp-x"])
    assert res.exit_code == 2 and "is shipped already" in res.output and "--check-offset" in res.output
    forced = CliRunner().invoke(app, ["ship", str(saved(tmp_path, retriever)), "--name", "sharp-x", "--force"])
    assert forced.exit_code == 0, forced.output


def test_the_manifest_says_which_seeded_train_questions_fitted_the_gate_and_which_were_held_out():
    from experiments.jobs.ship import _compiled_on

    fitted = {"train_offset": 0, "n_train": 334, "n_heldout": 130}
    config = {"gate": {"fitted_on": fitted}}
    assert _compiled_on({"dataset": "2wikimultihopqa"}, config) == (
        "2wikimultihopqa train, seeded questions 0-333, 334-463 held out"
    )
    assert _compiled_on({"dataset": "musique"}, {}) == "musique train"  # no gate: the corpus alone
