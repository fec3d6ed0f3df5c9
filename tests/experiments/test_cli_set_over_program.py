"""A user's --set / --config / --retriever-set over a loaded program (the shipped default for SHARP, or
--program FILE) is applied to the program and validated, never dropped: an unknown key or a bad value is
the usual error naming it; a valid one changes what runs, is recorded in the results' settings, and a
results file written under other settings is not resumed. For ask, eval, arena --program, tune, compile."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from doubles import KeywordRetriever, ScriptedLM, assign
from typer.testing import CliRunner

from experiments import runtime as rt_mod
from experiments.cli import app
from program.serving import shipped
from program.serving.registry import build_system
from program.serving.saved import save_program

ROW = {
    "type": "bridge",
    "level": "hard",
    "answer": "American",
    "supporting_facts": [["Pulp Fiction", 0], ["Quentin Tarantino", 0]],
    "context": [
        ["Pulp Fiction", ["Pulp Fiction is a 1994 film directed by Quentin Tarantino."]],
        ["Quentin Tarantino", ["Quentin Tarantino is an American film director."]],
    ],
}
ROWS = [
    {**ROW, "_id": f"a{i}", "question": f"What nationality is the director of Pulp Fiction ({i})?"} for i in range(3)
]


class World:
    """Scripted LMs for every program the CLI builds; what each retriever was opened with; the modules."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.calls = 0
        self.modules: list = []
        self.retrievers: list[dict] = []
        self.program = save_program(
            tmp_path / "programs" / "mine.json",
            build_system("sharp", KeywordRetriever(), {"accept_threshold": 0.7}),
            "sharp",
            retriever={"mode": "hybrid", "second_hop": True, "chroma_url": None},
        )

    def assign(self, module, lm_config) -> None:
        lms = {role: ScriptedLM(role, []) for role in ("planner", "critic", "generator")}
        lms["planner"].answers = itertools.repeat({"sub_queries": ["film director"]})
        lms["critic"].answers = itertools.repeat({"verdict": "sufficient", "confidence": 0.9})
        lms["generator"].answers = itertools.repeat({"answer": "American", "supporting_passages": [1]})
        self.lms = getattr(self, "lms", []) + list(lms.values())
        self.modules.append(module)
        assign(module, lms)

    @property
    def lm_calls(self) -> int:
        return sum(lm.calls for lm in getattr(self, "lms", []))

    def base(self) -> list[str]:
        return ["--data-dir", str(self.tmp_path / "datasets"), "--workspace", str(self.tmp_path / "ws")]

    def results_meta(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((self.tmp_path / "ws").rglob("*.meta.json"))]


@pytest.fixture
def world(tmp_path, monkeypatch):
    data = tmp_path / "datasets" / "hotpotqa"
    data.mkdir(parents=True)
    for split in ("dev", "train"):
        (data / f"{split}.json").write_text(json.dumps(ROWS))
    w = World(tmp_path)
    monkeypatch.setattr(rt_mod, "assign_lms", w.assign)

    def retriever(self, overrides=None):
        w.retrievers.append({**self.retriever_config, **(overrides or {})})
        return KeywordRetriever()

    monkeypatch.setattr(rt_mod.Runtime, "retriever", retriever)
    # the toy index "is" the one the shipped default was compiled on: SHARP without --program loads it
    monkeypatch.setattr(rt_mod.Runtime, "index_manifest", lambda self: {"corpus_sha256": "toy"})
    monkeypatch.setattr(
        shipped, "default_program", lambda corpus, lm, folder=None: shipped.Shipped("toy", w.program, {})
    )
    return w


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def said(res) -> str:
    return " ".join(res.output.split())


# ---- an unknown key or a bad value over a loaded program is the usual error, naming it ------------------
@pytest.mark.parametrize("program", ["shipped default", "--program FILE"])
@pytest.mark.parametrize(
    "item,names", [("no_such_key=1", "unknown key 'no_such_key'"), ("max_repairs=-1", "max_repairs")]
)
def test_ask_refuses_a_bad_set_over_a_loaded_program(world, program, item, names):
    extra = ["--program", str(world.program)] if program != "shipped default" else []
    res = invoke("ask", "What nationality is the director of Pulp Fiction?", *extra, "--set", item, *world.base())
    assert res.exit_code == 2, res.output
    assert names in said(res) and "error:" in said(res)
    assert world.lm_calls == 0  # refused before any question was asked


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "--split", "dev", "--no-traces"],
        ["tune", "--split", "dev", "--trials", "1", "--n", "1"],
        ["compile", "--n-train", "2", "--n-val", "1"],
    ],
    ids=lambda c: c[0],
)
def test_eval_tune_and_compile_refuse_an_unknown_key_over_a_program(world, command, new_store):
    uri = new_store(world.tmp_path / "ml.db")
    res = invoke(
        *command, "--program", str(world.program), "--set", "no_such_key=1", "--tracking-uri", uri, *world.base()
    )
    assert res.exit_code == 2, res.output
    assert "unknown key 'no_such_key'" in said(res)
    assert world.lm_calls == 0


# ---- a valid key is applied: it changes what runs and what is recorded ----------------------------------
def test_ask_applies_set_over_the_shipped_default(world):
    res = invoke("ask", "What nationality?", "--json", "--set", "accept_threshold=0.5", *world.base())
    assert res.exit_code == 0, res.output
    assert world.modules[-1].config.accept_threshold == 0.5
    res = invoke("ask", "What nationality?", "--json", *world.base())
    assert res.exit_code == 0 and world.modules[-1].config.accept_threshold == 0.7  # the program's own


def test_eval_records_set_over_a_program_and_never_resumes_other_settings(world, new_store):
    uri = new_store(world.tmp_path / "ml.db")
    args = ["eval", "--system", "sharp", "--split", "dev", "--json", "--no-traces", "--tracking-uri", uri]
    first = invoke(*args, *world.base())  # the shipped default as it is
    assert first.exit_code == 0, first.output
    calls = world.lm_calls
    again = invoke(*args, *world.base())
    assert again.exit_code == 0 and world.lm_calls == calls  # the same settings resume the same rows

    changed = invoke(*args, "--set", "accept_threshold=0.5", *world.base())
    assert changed.exit_code == 0, changed.output
    assert world.lm_calls > calls  # answered anew: not the rows made under the program's own threshold
    assert world.modules[-1].config.accept_threshold == 0.5
    thresholds = sorted(m["config"]["accept_threshold"] for m in world.results_meta())
    assert thresholds == [0.5, 0.7]  # two results files, each recording its settings

    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list", order_by=["start_time DESC"])
    assert runs[0].data.params["config.accept_threshold"] == "0.5"


def test_retriever_set_over_a_program_wins_over_what_the_program_recorded(world, new_store):
    uri = new_store(world.tmp_path / "ml.db")
    args = ["eval", "--program", str(world.program), "--split", "dev", "--json", "--no-traces", "--tracking-uri", uri]
    res = invoke(*args, "--retriever-set", "second_hop=false", *world.base())
    assert res.exit_code == 0, res.output
    assert world.retrievers[-1]["second_hop"] is False  # the program recorded second_hop=true
    (meta,) = world.results_meta()
    assert meta["retriever"]["overrides"]["second_hop"] is False


def test_arena_applies_set_to_a_program_entrant_by_its_name(world):
    args = ["arena", "--systems", "vanilla", "--program", f"mine={world.program}", "--limit", "2", "--no-tracking"]
    res = invoke(*args, "--json", "--set", "mine.accept_threshold=0.5", *world.base())
    assert res.exit_code == 0, res.output
    metas = {m.get("program") or m["system"]: m for m in world.results_meta()}
    assert metas["mine"]["config"]["accept_threshold"] == 0.5
    # the same arena under the program's own threshold is refused, not resumed into those rows
    res = invoke(*args, "--json", *world.base())
    assert res.exit_code == 2 and "other settings" in said(res), res.output
    bad = invoke(*args, "--set", "mine.no_such_key=1", *world.base())
    assert bad.exit_code == 2 and "unknown key 'no_such_key'" in said(bad), bad.output


def test_tune_applies_set_over_a_program(world, monkeypatch, new_store):
    from experiments.jobs import tune_job as tune
    from program.errors import ConfigError

    seen = []

    def run_tune(job, base, *a, **kw):
        seen.append(base.config)
        raise ConfigError("stopped by the test")

    monkeypatch.setattr(tune, "run_tune", run_tune)
    uri = new_store(world.tmp_path / "ml.db")
    res = invoke(
        "tune", "--program", str(world.program), "--split", "dev", "--n", "1", "--trials", "1",
        "--set", "accept_threshold=0.5", "--tracking-uri", uri, *world.base(),
    )  # fmt: skip
    assert "stopped by the test" in said(res), res.output
    assert seen[-1].accept_threshold == 0.5


def test_tune_applies_the_users_call_cost(world, monkeypatch, new_store):
    from experiments.jobs import tune_job as tune
    from program.errors import ConfigError

    seen = []

    def run_tune(job, *a, **kw):
        seen.append(job.cost)
        raise ConfigError("stopped by the test")

    monkeypatch.setattr(tune, "run_tune", run_tune)
    uri = new_store(world.tmp_path / "ml.db")
    args = ("tune", "--program", str(world.program), "--split", "dev", "--n", "1", "--tracking-uri", uri)
    res = invoke(*args, "--max-calls", "3", *world.base())
    assert "stopped by the test" in said(res), res.output
    assert (seen[-1].weight, seen[-1].max_calls) == (0.02, 3.0)  # what is left out keeps em-cost's default


def test_where_the_vectors_live_is_the_runtime_s_not_the_one_a_program_recorded(world):
    from experiments.runtime import as_run
    from program.serving.saved import read_program

    saved = read_program(world.program)  # recorded chroma_url=None: --chroma-url was dropped over it
    ran = as_run(saved, None, {"chroma_url": "http://127.0.0.1:8000", "second_hop": False})
    assert ran.retriever == {**saved.retriever, "chroma_url": "http://127.0.0.1:8000", "second_hop": False}
    assert as_run(saved, None, None) == saved and as_run(saved, {}, {}) == saved
