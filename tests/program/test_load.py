"""program.load: a shipped or saved program wired to its index, ranker and LMs, from Python (README "From
Python"), over a real index of the toy corpus (tests/load_world.py) with the rule LM over HTTP; and every bad
input the issue names: no index, a program fitted on another corpus, an LM that cannot be reached, a question
over the length limit, a models:/ URI, a calibrator fitted on another model, failing questions in a batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import dspy
import pytest
from doubles import KeywordRetriever, TimedSession, session_lm
from live_servers import RuleServer
from load_world import PASSAGES, RULES_MODEL, build_index, gate, save, ship, use_hash_embedder
from toy_world import README_CASES

import program.serving.batch
from program.errors import (
    ConfigError,
    IndexMismatchError,
    IndexMissingError,
    LMUnavailableError,
    ProgramFileError,
    SharpWarning,
)
from program.lm import DEFAULT_MODEL, LMSpec
from program.serving import defaults, shipped
from program.serving.loading import LoadedProgram, LoadInfo, lm_settings, load
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig

ROOT = Path(__file__).resolve().parents[2]
CASTLE, GREGOR = (c.question for c in README_CASES)


@pytest.fixture(scope="module")
def rules():
    server = RuleServer()
    yield server
    server.close()


@pytest.fixture
def world(tmp_path, monkeypatch):
    """WS/indexes/hotpotqa built over the toy corpus; a shipped folder holding sharp-hotpotqa, fitted on it
    with the rule LM, in place of program/compiled/. DSPy's cache as it was, after (a Runtime configures it)."""
    import dspy

    monkeypatch.setattr(dspy, "cache", dspy.cache)
    use_hash_embedder(monkeypatch)
    ws = tmp_path / "ws"
    manifest = build_index(ws)
    path = ship(tmp_path / "compiled", manifest)
    monkeypatch.setattr(shipped, "COMPILED_DIR", tmp_path / "compiled")
    return SimpleNamespace(ws=ws, manifest=manifest, corpus=manifest["corpus_sha256"], path=path, tmp=tmp_path)


def rules_lm(rules) -> dict:
    return {"lm": RULES_MODEL, "api_base": rules.base, "cache": False}


def steps(pred) -> list[dict]:
    """The trace as JSON would carry it, without the seconds each step took."""
    return [{k: v for k, v in s.items() if k != "seconds"} for s in json.loads(json.dumps(pred.trace, default=str))]


def test_the_shipped_program_of_a_corpus_answers_as_sharp_ask_builds_it(world, rules):
    from experiments.runtime import Runtime

    before = rules.requests
    qa = load("hotpotqa", workspace=world.ws, **rules_lm(rules))
    assert isinstance(qa, LoadedProgram) and isinstance(qa.program, SharpRAG)
    assert qa.info.name == "sharp-hotpotqa" and qa.info.program == world.path
    assert qa.info.index == world.ws / "indexes" / "hotpotqa" and qa.info.corpus_sha256 == world.corpus
    assert qa.info.models == {"planner": RULES_MODEL, "critic": RULES_MODEL, "generator": RULES_MODEL}

    pred = qa(question=CASTLE)
    assert pred.answer == "Monticello" and pred.stop_reason
    assert {"Castle Hill (Virginia)", "Monticello"} <= {p.title for p in pred.passages}
    assert pred.cited_ids and set(pred.cited_ids) <= {p.id for p in pred.passages}
    assert pred.cost["lm_calls"] == rules.requests - before > 0
    assert [s["role"] for s in pred.trace][0] == "retriever" and pred.trace[-1]["role"] == "select"

    # the CLI's composition (experiments/runtime.py) of the same program, index and LMs: the same prediction
    rt = Runtime(dataset="hotpotqa", workspace=world.ws, lm_config=lm_settings(**rules_lm(rules)))
    cli = rt.load_program(rt.program_path(None))[0](question=CASTLE)
    assert cli.answer == pred.answer and steps(cli) == steps(pred)
    assert [p.id for p in cli.passages] == [p.id for p in pred.passages]


def test_a_program_is_found_by_corpus_name_program_name_file_or_model_folder(world, rules):
    assert load(workspace=world.ws, **rules_lm(rules)).info.name == "sharp-hotpotqa"  # the CLI's corpus
    assert load("sharp-hotpotqa", workspace=world.ws, **rules_lm(rules)).info.program == world.path
    own = save(world.tmp / "mine.json", world.manifest, accept_threshold=0.3)
    qa = load(own, workspace=world.ws, **rules_lm(rules))  # its dataset (hotpotqa) names the index
    assert qa.info.name == "mine" and qa.program.config.accept_threshold == 0.3
    folder = world.tmp / "model" / "artifacts"
    folder.mkdir(parents=True)
    (folder / "program.json").write_bytes(own.read_bytes())
    assert load(folder.parent, index=world.ws / "indexes" / "hotpotqa", **rules_lm(rules)).info.program == (
        folder / "program.json"
    )
    with pytest.raises(ProgramFileError, match="no shipped program is named 'musique' or compiled on"):
        load("musique", workspace=world.ws)
    with pytest.raises(ProgramFileError, match="no program at /no/such.json"):
        load("/no/such.json")


def test_the_workspace_default_is_the_cli_s(world, rules, monkeypatch):
    from experiments import settings

    monkeypatch.setenv("SHARP_WORKSPACE", str(world.ws))
    qa = load("hotpotqa", **rules_lm(rules))
    assert qa.info.index == settings.index_dir("hotpotqa", settings.workspace()) == world.ws / "indexes" / "hotpotqa"


def test_settings_are_validated_and_none_is_dropped(world, rules):
    qa = load(
        "hotpotqa", workspace=world.ws, roles={"critic": "openai/judge"}, config={"max_repairs": 0}, **rules_lm(rules)
    )
    assert qa.info.models["critic"] == "openai/judge" and qa.program.config.max_repairs == 0
    assert {p.lm.spec.cache for _, p in qa.program.named_predictors()} == {False}
    with pytest.raises(ConfigError, match="unknown role 'judge2'"):
        load("hotpotqa", workspace=world.ws, roles={"judge2": "openai/x"})
    with pytest.raises(ConfigError, match="unknown key 'max_repair'"):
        load("hotpotqa", workspace=world.ws, config={"max_repair": 1})
    with pytest.raises(ConfigError, match="not a model string"):
        load("hotpotqa", workspace=world.ws, lm="gpt4")


# ---- bad input ----------------------------------------------------------------------------------------------
def test_no_index_for_the_corpus_gives_the_command_that_builds_it(tmp_path):
    """The real shipped program (program/compiled/) in a workspace that has no index."""
    ws = tmp_path / "empty"
    with pytest.raises(IndexMissingError) as info:
        load("hotpotqa", workspace=ws)
    assert f"no retrieval index at {ws / 'indexes' / 'hotpotqa'}" in str(info.value)
    assert f"sharp index --dataset hotpotqa --workspace {ws}" in str(info.value)


def test_a_program_fitted_on_another_corpus_names_both(world):
    # the real shipped program: its evidence ranker and gate were fitted on HotpotQA's corpus, not the toy one
    (real,) = (
        s
        for s in shipped.shipped_programs(Path(shipped.__file__).parents[1] / "compiled")
        if s.name == "sharp-hotpotqa"
    )
    with pytest.raises(IndexMismatchError) as info:
        load(real.path, workspace=world.ws)
    message = str(info.value)
    assert real.corpus_sha256[:12] in message and world.corpus[:12] in message
    assert "'sharp-hotpotqa'" in message and "dataset 'hotpotqa'" in message
    assert "sharp index --dataset hotpotqa" in message

    other = save(world.tmp / "other.json", world.manifest, gate=gate("f" * 64, "2wikimultihopqa"))
    with pytest.raises(IndexMismatchError, match=r"fitted on dataset '2wikimultihopqa' \(corpus ffffffffffff"):
        load(other, index=world.ws / "indexes" / "hotpotqa")


def test_an_lm_that_cannot_be_reached_fails_the_first_question_with_one_line(world, closed_port_base):
    qa = load("hotpotqa", workspace=world.ws, lm=LMSpec(model="openai/x", api_base=closed_port_base, num_retries=0))
    with pytest.raises(LMUnavailableError) as info:
        qa(question=CASTLE)
    error = info.value
    assert "\n" not in str(error) and closed_port_base.split("/v1")[0] in str(error)
    assert error.__cause__ is None and error.__suppress_context__  # no chained library traceback


def test_a_question_over_the_length_limit_is_cut_with_a_warning(world, rules):
    qa = load("hotpotqa", workspace=world.ws, config={"max_question_chars": 60}, **rules_lm(rules))
    with pytest.warns(SharpWarning, match="has 76 characters, over this program's limit of 60"):
        pred = qa(question=CASTLE)
    assert {"role": "input", "note": "question truncated to 60 characters"}.items() <= pred.trace[0].items()
    assert all(len(q) <= 60 for q in pred.trace[1]["queries"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharpWarning)
        qa(question=CASTLE[:60])  # at the limit: no warning


def test_a_models_uri_is_resolved_where_mlflow_lives():
    from experiments.export import resolve_program_path  # the function the message names

    with pytest.raises(ProgramFileError) as info:
        load("models:/sharp-hotpotqa/1")
    assert "from experiments.export import resolve_program_path" in str(info.value)
    assert callable(resolve_program_path)


def test_a_gate_fitted_on_another_model_says_so(world, rules, caplog):
    from experiments.runtime import Runtime

    compiled_with_local = save(world.tmp / "local.json", world.manifest, lm=DEFAULT_MODEL, gate=gate(world.corpus))
    with pytest.warns(SharpWarning, match=f"gate was fitted on the log-probabilities {DEFAULT_MODEL} wrote as its gen"):
        load(compiled_with_local, workspace=world.ws, **rules_lm(rules))
    rt = Runtime(dataset="hotpotqa", workspace=world.ws, lm_config=lm_settings(**rules_lm(rules)))
    rt.load_program(compiled_with_local)  # `sharp ask --program ...`: in the log (on the console)
    assert any("gate was fitted on the log-probabilities" in r.getMessage() for r in caplog.records)

    same_model = save(world.tmp / "rules.json", world.manifest, lm=RULES_MODEL, gate=gate(world.corpus))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharpWarning)
        load(same_model, workspace=world.ws, **rules_lm(rules))


# ---- many questions --------------------------------------------------------------------------------------------
def test_batch_keeps_the_order_and_a_failed_question_is_an_error_row(world, rules):
    qa = load("hotpotqa", workspace=world.ws, **rules_lm(rules))
    preds = qa.batch([CASTLE, "   ", dspy.Example(question=GREGOR, answer="?")], threads=2)
    assert [p.answer for p in preds] == ["Monticello", "", "Love Actually"]
    assert [p.error for p in preds][::2] == [None, None]
    failed = preds[1]
    assert failed.stop_reason == "error" and failed.error.startswith("QuestionError: empty question")
    assert failed.passages == [] and failed.trace == [] and failed.cost["lm_calls"] == 0


def test_batch_stops_after_failures_in_a_row(world, rules):
    qa = load("hotpotqa", workspace=world.ws, **rules_lm(rules))
    before = rules.requests
    with pytest.warns(SharpWarning, match="stopped after 2 questions in a row failed"):
        preds = qa.batch(["", " ", CASTLE, GREGOR], max_failed_in_a_row=2)
    assert [p.answer for p in preds] == ["", "", "", ""] and rules.requests == before  # the rest not asked
    assert all(p.error.startswith("not asked: stopped after 2") for p in preds[2:])


@pytest.fixture
def threads_used(monkeypatch):
    used = []
    real = program.serving.batch.run_each

    def run_each(fn, items, threads=1):
        used.append(threads)
        return real(fn, items, threads)

    monkeypatch.setattr(program.serving.batch, "run_each", run_each)
    return used


def test_batch_with_the_embedded_model_runs_one_question_at_a_time(threads_used):
    module = SharpRAG(KeywordRetriever(PASSAGES), SharpConfig(ranker=None))
    lm = session_lm(TimedSession())  # an embedded (local/...) model, without a model
    for _, pred in module.named_predictors():
        pred.lm = lm
    qa = LoadedProgram(module, LoadInfo(Path("p.json"), "p", "sharp", None, Path("index"), None))
    with pytest.warns(SharpWarning, match="local/smollm2-135m answers one question at a time"):
        preds = qa.batch([CASTLE, GREGOR], threads=4)
    assert threads_used == [1] and [p.error for p in preds] == [None, None]
    with pytest.raises(ConfigError, match="threads must be at least 1"):
        qa.batch([CASTLE], threads=0)


def test_batch_with_a_server_runs_side_by_side(world, rules, threads_used):
    qa = load("hotpotqa", workspace=world.ws, **rules_lm(rules))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharpWarning)
        preds = qa.batch([GREGOR, CASTLE, GREGOR], threads=3)
    assert threads_used == [3] and [p.answer for p in preds] == ["Love Actually", "Monticello", "Love Actually"]


# ---- the package stays light ---------------------------------------------------------------------------------
def test_import_program_loads_nothing_heavy_and_load_on_first_use():
    code = (
        "import sys, program\n"
        "heavy = ('dspy', 'chromadb', 'torch', 'mlflow', 'experiments')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "from program import load\n"
        "print(load.__module__, 'experiments' in sys.modules, 'mlflow' in sys.modules)\n"
        "try:\n    program.nothing\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert out.stdout.splitlines() == [
        "[]",
        "program.serving.loading False False",
        "module 'program' has no attribute 'nothing'",
    ]
    assert defaults.DEFAULT_DATASET == "hotpotqa"
