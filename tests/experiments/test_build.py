"""`sharp build` end to end, as a user with a corpus of their own and an API model would run it: a folder the test
writes (tests/build_world.py), an OpenAI-compatible server on 127.0.0.1 answering as ``openai/gpt-4o-mini`` (a
model LiteLLM's cost map prices) without token log-probabilities, ``--threads 2``. The build ships a program,
``load(FOLDER)`` answers with it, and the same command again skips every step. A build killed (SIGKILL) in the
middle of its recording resumes to the same program, byte for byte. And what a build refuses or stops for."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace

import dspy
import pytest
from build_world import CITIES, RULES, question, write_folder
from live_servers import ROOT, RuleServer, child_env
from load_world import use_hash_embedder
from typer.testing import CliRunner

from experiments.cli import app
from program.errors import SharpWarning
from program.serving import shipped

runner = CliRunner()
MODEL = "openai/gpt-4o-mini"
NAME = "sharp-tinybooks-gpt-4o-mini"
SIZES = ["--heldout", "8", "--trials", "8"]
# the default search space with the chain among a bridge's repairs: the build compiles the hop planner and records
# every bridge's chain (tests/build_world.py: its plan mends the drafts that stop at the author)
CHAIN_SPACE = "repair_bridge: [focus, chain, 'focus,chain', none]\n"


@pytest.fixture(scope="module")
def server():
    rules = RuleServer(rules=RULES)
    yield rules
    rules.close()


@pytest.fixture(scope="module")
def place(tmp_path_factory, tracking_uri):
    """A dataset folder of one's own, the hash embedder, the rule server's model, a folder of shipped programs."""
    from rich.console import Console

    from experiments.console import terminal

    tmp = tmp_path_factory.mktemp("build")
    previous = dspy.cache  # --cache-dir points DSPy's cache there for the process: put it back after
    with pytest.MonkeyPatch.context() as mp:
        use_hash_embedder(mp)
        mp.setattr(shipped, "COMPILED_DIR", tmp / "compiled")
        mp.setattr(terminal, "err_console", Console(stderr=True, width=100_000))  # one line a message
        (tmp / "chain.yaml").write_text(CHAIN_SPACE)
        yield SimpleNamespace(tmp=tmp, folder=write_folder(tmp / "tinybooks"), uri=tracking_uri,
                              sizes=[*SIZES, "--space", str(tmp / "chain.yaml"), "--planner-demos", "tinybooks",
                                     "--set", "hop_passage_chars=3000"])  # fmt: skip
    dspy.cache = previous


def sharp(place, server, *args: str, ws: str = "ws", lm: str = MODEL, base: str | None = None) -> tuple[int, str]:
    where = ["--dataset", str(place.folder), "--workspace", str(place.tmp / ws)]
    lms = ["--lm", lm, "--api-base", base or server.base, "--cache-dir", str(place.tmp / f"cache-{ws}")]
    track = ["--tracking-uri", place.uri, "--experiment", "build-tests"] if args[0] == "build" else []
    res = runner.invoke(app, [*args, *where, *lms, *track])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


@pytest.fixture(scope="module")
def built(place, server):
    """The build, once: its output, the LM requests it made, its workspace."""
    code, out = sharp(place, server, "build", "--threads", "2", *place.sizes)
    assert code == 0, out
    return SimpleNamespace(out=out, requests=server.requests, ws=place.tmp / "ws")


def test_a_build_ships_a_checked_program_that_load_answers_with_and_a_rerun_skips_every_step(place, server, built):
    out = built.out
    # before the LM-bound part: the probe, the estimate, the money, and that the model wrote no log-probabilities
    assert "probe: 3 questions recorded" in out and "to record: 21 questions" in out, out
    assert "money: about $" in out and f"{MODEL}: $0.15 per million prompt tokens" in out, out
    assert f"{MODEL} returns no token log-probabilities: the gate is fitted on the features that remain" in out
    assert "recording tinybooks-gpt-4o-mini-train.jsonl: 24/24 questions" in out  # the progress line
    # the hop planner's demos: the corpus's own gold plans (its train rows' evidences), no LM call
    assert "planner: " in out and "4 demos from" in out, out
    shipped_file = place.tmp / "compiled" / f"{NAME}.json"
    entry = json.loads((place.tmp / "compiled" / "MANIFEST.json").read_text())["programs"][NAME]
    assert entry["lm"] == MODEL and entry["file"] == shipped_file.name
    assert entry["commands"] == [
        f"sharp build --dataset {place.folder} --lm {MODEL} --heldout 8 --trials 8 --planner-demos tinybooks "
        f"--space {place.tmp / 'chain.yaml'} --set hop_passage_chars=3000"  # a --set decides the program too
    ]
    assert entry["figures"]["heldout_questions"] == 8 and entry["figures"]["train_questions"] == 24
    program = json.loads(shipped_file.read_text())
    assert program["config"]["hop_passage_chars"] == 3000
    gate = program["config"]["gate"]
    assert gate is not None and not {"lp_mean", "lp_min", "p_first", "lp_missing", "yes_margin"} & set(gate["features"])
    assert program["config"]["yes_threshold"] is None  # P(yes) needs log-probabilities: left off
    assert "run_id" not in program["meta"] and "index_dir" not in program["meta"]
    measured = json.loads((built.ws / "builds" / "measured.json").read_text())  # what a later notice says
    assert measured["corpora"]["tinybooks"]["train_questions"] == 24
    assert measured["models"][MODEL]["seconds_per_question"] >= 0

    from program import load

    qa = load(place.folder, workspace=built.ws, lm=MODEL, api_base=server.base)
    assert qa.info.name == NAME
    assert qa(question=question(1)).answer == CITIES[1]

    code, again = sharp(place, server, "build", "--threads", "2", *place.sizes)
    assert code == 0, again
    assert "steps run: none (every step was up to date)" in again, again
    assert server.requests == built.requests  # no LM call
    assert json.loads(shipped_file.read_text()) == program


def test_the_command_a_build_records_names_every_option_that_decides_its_program():
    """--config, the role models, the LM config and each --set decide what a build makes: the command recorded with
    the program (MANIFEST.json) names them, in the order given; where things run (--api-base, --workspace) it
    does not."""
    from experiments import settings
    from experiments.commands.build import build_command, deciding_options
    from experiments.options import Options

    opts = Options(lm="m", api_base="http://127.0.0.1:9/v1", planner_lm="openai/gpt-4o", config=settings.PROJECT_ROOT / "sys.yaml",
                   set_=("hop_passage_chars=3000", "chain_answer=hop"))  # fmt: skip
    sizes = {"--heldout": 8}
    text = build_command(
        "tinybooks", "m", sizes, None, settings.PROJECT_ROOT / "workspace", None, deciding_options(opts)
    )
    assert text == ("sharp build --dataset tinybooks --lm m --heldout 8 --config sys.yaml --planner-lm openai/gpt-4o "
                    "--set hop_passage_chars=3000 --set chain_answer=hop")  # fmt: skip
    assert build_command("tinybooks", "m", sizes, None, settings.PROJECT_ROOT / "workspace") == (
        "sharp build --dataset tinybooks --lm m --heldout 8"
    )


def test_the_build_is_one_mlflow_run_with_a_nested_run_per_step_and_registers_its_program(place, built):
    import mlflow
    from mlflow.tracking import MlflowClient

    from experiments.jobs.build_job import STEPS

    exp = mlflow.get_experiment_by_name("build-tests")
    runs = mlflow.search_runs([exp.experiment_id], output_format="list")
    parents = [r for r in runs if r.data.tags.get("kind") == "build"]
    first = min(parents, key=lambda r: r.info.start_time)
    steps = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == first.info.run_id]
    assert sorted(r.data.tags["step"] for r in steps) == sorted(STEPS)
    assert first.data.params["logprobs"] == "False" and first.data.metrics["heldout.heldout_questions"] == 8
    gate_step = next(r for r in steps if r.data.tags["step"] == "gate")
    compile_run = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == gate_step.info.run_id)
    pictures = {a.path for a in MlflowClient().list_artifacts(compile_run.info.run_id, "critic")}
    assert {"critic/roc.png", "critic/reliability.png"} <= pictures
    ship_step = next(r for r in steps if r.data.tags["step"] == "ship")
    assert ship_step.data.params["ship.decision"] == "shipped"
    versions = MlflowClient().search_model_versions(f"name='{NAME}'")
    assert [str(v.version) for v in versions] == ["1"]


CHILD = """
import sys
from pathlib import Path
sys.path[:0] = [{root!r}, {tests!r}]
from doubles import HashEmbedderFactory
import data.indexing, program.retrieval.factory as factory, program.serving.shipped as shipped
data.indexing.Embedder = HashEmbedderFactory
factory.shared_embedder = HashEmbedderFactory.from_config
shipped.COMPILED_DIR = Path({compiled!r})
from experiments.cli import app
app({args!r}, prog_name="sharp")
"""


def test_a_build_killed_mid_recording_resumes_by_its_manifest_command_to_the_same_program(
    place, server, built, monkeypatch
):
    """SIGKILL in the middle of the recording; then the command program/compiled/MANIFEST.json records for the
    shipped program, run in that workspace, records only what the killed run had not and rebuilds the program byte
    for byte (its sha256), shipped over a copy of it: the ship check runs (a tie ships), per question form. (The
    rebuild of a shipped program from its committed recording alone, no LM call, is test_manifest_rebuild.py's.)"""
    import shlex

    ws = place.tmp / "ws-killed"
    for part in ("indexes", "rankers"):  # the same index (its manifest is in the program), its ranker fitted
        shutil.copytree(built.ws / part, ws / part)
    compiled = place.tmp / "compiled-killed"
    monkeypatch.setattr(shipped, "COMPILED_DIR", compiled)
    args = ["build", "--dataset", str(place.folder), "--workspace", str(ws), "--lm", MODEL, "--api-base",
            server.base, "--no-cache", "--tracking-uri", place.uri, "--experiment", "build-tests", *place.sizes]  # fmt: skip
    code = CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"), compiled=str(compiled), args=args)
    recording = ws / "recordings" / "tinybooks-gpt-4o-mini-train.jsonl"
    start = server.requests
    log = place.tmp / "killed.log"
    with open(log, "wb") as fh:
        child = subprocess.Popen([sys.executable, "-c", code], env=child_env(), start_new_session=True, stdout=fh,
                                 stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while server.requests - start < 20 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert child.poll() is None, log.read_text()[-3000:]
        os.killpg(child.pid, signal.SIGKILL)  # mid-recording: no chance to close anything
        child.wait(10)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    kept = recording.read_text().splitlines()
    assert 3 <= len(kept) < 24, "the kill did not land mid-recording"
    assert not (compiled / f"{NAME}.json").exists()

    entry = entry_of(place)
    command = shlex.split(entry["commands"][0])
    assert command[:2] == ["sharp", "build"]
    shutil.rmtree(compiled, ignore_errors=True)
    shutil.copytree(place.tmp / "compiled", compiled)  # the shipped program the rebuild is checked against
    before = server.requests
    res = runner.invoke(app, [*command[1:], "--workspace", str(ws), "--api-base", server.base, "--no-cache",
                              "--tracking-uri", place.uri, "--experiment", "build-tests"])  # fmt: skip
    out = " ".join(res.output.split())
    assert res.exit_code == 0 and "Traceback" not in out, out
    assert "ranker: up to date" in out and "index: up to date" in out and "probe:" in out, out
    assert 0 < server.requests - before < built.requests  # what the killed run recorded is not asked again
    assert shipped.file_sha256(compiled / f"{NAME}.json") == entry["sha256"]
    assert (compiled / f"{NAME}.json").read_bytes() == (place.tmp / "compiled" / f"{NAME}.json").read_bytes()
    assert "held out: new" in out and "difference +0.000" in out, out
    check = json.loads((compiled / "MANIFEST.json").read_text())["programs"][NAME]["figures"]
    by_form = check["ship_check"]["by group"]
    assert set(by_form) <= {"bridge", "comparison", "yesno"} and by_form
    assert sum(g["questions"] for g in by_form.values()) == check["heldout_questions"]


def entry_of(place) -> dict:
    return json.loads((place.tmp / "compiled" / "MANIFEST.json").read_text())["programs"][NAME]


def test_form_floors_keep_each_form_of_the_named_program_in_every_search_by_replay(place, server, built):
    """--form-floors: each question form's EM under the named program, on the tuning questions, replayed from the
    build's recording, is a floor every search keeps; the floors are in the steps' inputs and the command."""
    floor_program = place.tmp / "compiled" / f"{NAME}.json"
    ws = place.tmp / "ws-floors"
    for part in ("indexes", "rankers", "recordings"):
        shutil.copytree(built.ws / part, ws / part)
    before = server.requests
    code, out = sharp(
        place, server, "build", *place.sizes, "--form-floors", str(floor_program), "--no-ship", ws="ws-floors"
    )
    assert code == 0, out
    assert server.requests == before  # the floors and the searches replay: no LM call
    assert f"form floors from {floor_program} on the 16 tuning questions: " in out, out
    assert f"--form-floors {floor_program}" in out.split("[1/10]")[0]  # in the command the build records
    assert "(floor " in out and "below the floor" not in out, out  # the shipped program itself meets its floors
    stamp = json.loads((ws / "programs" / f"{NAME}-policy.inputs.json").read_text())
    floors = stamp["inputs"]["floors"]
    assert set(floors) <= {"bridge", "comparison", "yesno"} and floors
    assert all(0.0 <= v <= 1.0 for v in floors.values())
    rules = json.loads((ws / "programs" / f"{NAME}-rules.inputs.json").read_text())
    assert rules["inputs"]["floors"] == floors  # every search of the build keeps them
    assert "--form-floors" not in json.dumps(entry_of(place))  # --no-ship: the manifest keeps the first command


def test_form_floors_from_a_program_that_is_not_there_are_refused_before_any_work(place, server):
    code, out = sharp(
        place, server, "build", *place.sizes, "--form-floors", str(place.tmp / "nowhere.json"), ws="ws-nofloors"
    )
    assert code != 0 and "--form-floors: no program at" in out and "nowhere.json" in out, out
    assert not (place.tmp / "ws-nofloors" / "recordings").exists()


def test_sharp_ask_picks_the_program_built_for_the_model_and_names_the_build_for_another(place, server, built):
    code, out = sharp(place, server, "ask", question(1), "--json")
    assert code == 0 and f'"answer": "{CITIES[1]}"' in out, out
    code, out = sharp(place, server, "ask", question(1), "--json", lm="openai/gpt-4o")
    assert code == 0, out
    assert "running the ranked plain read" in out, out
    assert f"build one for it with `sharp build --dataset {place.folder} --lm openai/gpt-4o` (24 train questions" in out


def test_a_corpus_without_supporting_paragraphs_keeps_the_hybrid_order_and_says_so(tmp_path):
    from experiments.jobs.build_job import Build, BuildJob
    from experiments.runtime import Runtime

    rt = Runtime(dataset=str(write_folder(tmp_path / "bare", labels=False)), workspace=tmp_path / "ws")
    build = Build(rt, BuildJob(), say=lambda line: None)
    note = build.ranker_fresh()
    assert (
        note == "no supporting-paragraph labels in the train questions: the evidence ranker is left at the hybrid order"
    )
    assert build.job.system_config["ranker"] is None  # every step then reads the hybrid order


def test_the_build_s_questions_fit_and_hold_out_as_asked_or_say_how_many_are_needed():
    from experiments.jobs.build_job import BuildJob
    from program.errors import ConfigError

    assert BuildJob().sizes(464) == (325, 139)  # 30% held out
    assert BuildJob(heldout=130).sizes(464) == (334, 130)
    assert BuildJob(limit=100, heldout=30).sizes(464) == (70, 30)
    assert BuildJob(limit=20).sizes(464) == (14, 6)
    assert BuildJob(limit=15).sizes(464) == (10, 5)  # at least 5 held out
    with pytest.raises(
        ConfigError, match=r"12 train questions .* with 5 held out: too few; a build fits on at least 10"
    ):
        BuildJob(limit=12).sizes(464)


# ---- what a build refuses, or stops for -------------------------------------------------------------------------
def test_a_model_that_does_not_answer_is_reported_before_anything_is_recorded(place, server, built, fake_openai):
    shutil.copytree(built.ws / "indexes", place.tmp / "ws-down" / "indexes")
    fake_openai.mode = "401"  # it listens (GET /models answers), but refuses every completion
    code, out = sharp(place, server, "build", *SIZES, ws="ws-down", lm="openai/gpt-4o", base=fake_openai.base)
    assert code == 2, out
    assert "the model openai/gpt-4o did not answer the first question recorded" in out, out
    assert "no question was recorded" in out and "rerun `sharp build" in out
    records = (place.tmp / "ws-down" / "recordings" / "tinybooks-gpt-4o-train.jsonl").read_text().splitlines()
    assert len(records) == 1 and json.loads(records[0])["error"]  # one question asked, kept as failed


def test_a_server_that_is_not_there_is_reported_before_any_work(place, server, closed_port_base):
    code, out = sharp(place, server, "build", ws="ws-closed", base=closed_port_base)
    assert code == 2 and "no LM server answers at" in out and closed_port_base in out, out
    assert not (place.tmp / "ws-closed" / "indexes").exists()


def test_the_cost_guard_stops_the_recording_keeps_it_and_the_same_command_goes_on(place, server, built):
    shutil.copytree(built.ws / "indexes", place.tmp / "ws-cost" / "indexes")
    args = ["build", *SIZES, "--max-cost", "0.0001"]
    code, out = sharp(place, server, *args, ws="ws-cost", lm="openai/gpt-4o-mini-2024-07-18")
    assert code == 2, out
    assert "stopped by --max-cost $0.0001" in out and "rerun `sharp build" in out, out
    path = place.tmp / "ws-cost" / "recordings" / "tinybooks-gpt-4o-mini-2024-07-18-train.jsonl"
    first = len(path.read_text().splitlines())
    assert 1 <= first < 24
    code, out = sharp(place, server, *args, ws="ws-cost", lm="openai/gpt-4o-mini-2024-07-18")
    assert code == 2 and "stopped by --max-cost" in out, out
    assert len(path.read_text().splitlines()) > first  # resumed where it stopped, and stopped again


def test_a_folder_without_its_corpus_is_refused_before_any_work(place, server, tmp_path):
    folder = write_folder(tmp_path / "nocorpus")
    (folder / "corpus.jsonl").unlink()
    res = runner.invoke(app, ["build", "--dataset", str(folder), "--workspace", str(tmp_path / "ws"), "--lm", MODEL,
                              "--api-base", server.base])  # fmt: skip
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and f"{folder} has no corpus.jsonl" in out and "at least 15 questions" in out, out
    assert not (tmp_path / "ws" / "indexes").exists()


def test_max_cost_with_a_model_the_cost_map_does_not_price_is_refused_naming_it(place, server):
    code, out = sharp(place, server, "build", "--max-cost", "1", ws="ws-unpriced", lm="openai/rules")
    assert code == 2, out
    assert "LiteLLM's cost map has no price for openai/rules" in out and "--limit" in out, out


def test_a_planner_demo_dataset_that_is_not_there_is_refused_before_any_work(place, server, tmp_path):
    code, out = sharp(place, server, "build", "--planner-demos", f"tinybooks,{tmp_path / 'nowhere'}", ws="ws-nodemos")
    assert code != 0 and "nowhere" in out and "no such" in out.lower(), out
    assert not (place.tmp / "ws-nodemos" / "indexes").exists()  # nothing built


def test_threads_with_the_embedded_model_are_refused(place, server):
    res = runner.invoke(app, ["build", "--dataset", str(place.folder), "--threads", "2"])
    assert res.exit_code == 2, res.output
    assert "the embedded model local/qwen2.5-coder-1.5b answers one question at a time" in " ".join(res.output.split())


def test_a_built_program_loaded_with_another_model_warns_naming_both(place, server, built):
    from program import load

    program = built.ws / "programs" / f"{NAME}.json"
    with pytest.warns(SharpWarning) as caught:
        load(program, index=built.ws / "indexes" / "tinybooks", lm="openai/gpt-4o", api_base=server.base)
    text = " ".join(str(w.message) for w in caught)
    assert f"built for {MODEL} and now runs with openai/gpt-4o" in text, text
    assert f"sharp build --dataset {place.folder} --lm openai/gpt-4o" in text, text
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharpWarning)
        load(program, index=built.ws / "indexes" / "tinybooks", lm=MODEL, api_base=server.base)


def test_load_of_a_folder_without_a_program_for_the_model_names_the_build_command(place, built):
    from program import load
    from program.errors import ProgramFileError

    with pytest.raises(ProgramFileError) as info:
        load(place.folder, workspace=built.ws, lm="openai/gpt-4o")
    assert f"build one for it with `sharp build --dataset {place.folder} --lm openai/gpt-4o`" in str(info.value)


def test_sharp_record_writes_the_rounds_a_build_records(place, server, built):
    out = place.tmp / "record.jsonl"
    planner = built.ws / "programs" / f"{NAME}-planner.json"  # the program the build records with (its hop planner)
    code, text = sharp(place, server, "record", "--n", "5", "--offset", "2", "--actions", "focus,retrieve,chain",
                       "--program", str(planner), "--out", str(out))  # fmt: skip
    assert code == 0, text
    assert "5 questions, 5 recorded now" in text, text
    mine = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    theirs = {r["id"]: r for r in map(json.loads, (built.ws / "recordings" / "tinybooks-gpt-4o-mini-train.jsonl")
                                      .read_text().splitlines())}  # fmt: skip
    assert len(mine) == 5
    for qid, rec in mine.items():  # the same rounds as the build's recording, read alike
        assert [(r["action"], r["reading"], r["read"]["answer"]) for r in rec["rounds"]] == [
            (r["action"], r["reading"], r["read"]["answer"]) for r in theirs[qid]["rounds"]
        ]
    # the options of the lab's record_drafts.py, which it replaces: critic ranges by seeded position, a saved
    # program, a ranker by name, focused reads after every rejected draft, the seed
    more = place.tmp / "record-more.jsonl"
    program = built.ws / "programs" / f"{NAME}.json"
    code, text = sharp(place, server, "record", "--n", "4", "--offset", "1", "--seed", "0", "--critic-range", "2:4",
                       "--focus-when", "rejected", "--actions", "focus", "--program", str(program), "--ranker",
                       "tinybooks", "--out", str(more))  # fmt: skip
    assert code == 0, text
    recs = [json.loads(line) for line in more.read_text().splitlines()]
    assert [r["critiqued"] for r in recs] == [False, True, True, False]  # seeded positions 1, 2, 3, 4
    assert all(r["action"] in ("draft", "focus") for rec in recs for r in rec["rounds"])
    code, text = sharp(place, server, "record", "--n", "4", "--actions", "hop", "--out", str(more))
    assert code == 2 and "--actions: unknown ['hop']" in text, text
