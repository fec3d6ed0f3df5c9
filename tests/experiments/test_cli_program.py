"""`sharp eval` and `sharp ask` end to end through the CLI, with scripted LMs and a tiny retriever:
the JSON output, the MLflow run (params, metrics, artifacts), the results file and resume."""

from __future__ import annotations

import itertools
import json

import pytest
from doubles import KeywordRetriever, ScriptedLM, assign
from typer.testing import CliRunner

from experiments import runtime as rt_mod
from experiments.cli import app

ROWS = [
    {
        "_id": "a1",
        "question": "What nationality is the director of Pulp Fiction?",
        "answer": "American",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["Pulp Fiction", 0], ["Quentin Tarantino", 0]],
        "context": [
            ["Pulp Fiction", ["Pulp Fiction is a 1994 film directed by Quentin Tarantino."]],
            ["Quentin Tarantino", ["Quentin Tarantino is an American film director."]],
        ],
    },
    {
        "_id": "a2",
        "question": "Which country was Krzysztof Kieslowski from?",
        "answer": "Poland",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["Krzysztof Kieslowski", 0]],
        "context": [["Krzysztof Kieslowski", ["Krzysztof Kieslowski was a Polish film director."]]],
    },
]


class Scripted:
    """Counts LM calls across every program the CLI builds."""

    def __init__(self):
        self.lms = []

    def assign(self, module, lm_config):
        lms = {
            "planner": ScriptedLM("planner", []),
            "critic": ScriptedLM("critic", []),
            "generator": ScriptedLM("generator", []),
        }
        lms["planner"].answers = itertools.repeat(
            {"sub_questions": ["Who directed the film?", "Where is the director from?"]}
        )
        lms["critic"].answers = itertools.repeat({"verdict": "supported", "confidence": 0.9})
        lms["generator"].answers = itertools.repeat({"answer": "American", "supporting_passages": [1]})
        self.lms += lms.values()
        assign(module, lms)

    @property
    def calls(self):
        return sum(lm.calls for lm in self.lms)


@pytest.fixture
def world(tmp_path, monkeypatch):
    data = tmp_path / "datasets" / "hotpotqa"
    data.mkdir(parents=True)
    (data / "dev.json").write_text(json.dumps(ROWS))
    scripted = Scripted()
    monkeypatch.setattr(rt_mod, "assign_lms", scripted.assign)
    monkeypatch.setattr(rt_mod.Runtime, "retriever", lambda self, overrides=None: KeywordRetriever())
    # --program none: the uncompiled SHARP (no program is shipped for this toy corpus: the ranked read otherwise)
    base = ["--data-dir", str(tmp_path / "datasets"), "--workspace", str(tmp_path / "ws"), "--program", "none"]
    return tmp_path, base, scripted


def test_eval_json_mlflow_run_and_resume(world, new_store):
    tmp_path, base, scripted = world
    uri = new_store(tmp_path / "ml.db")
    args = ["eval", "--system", "sharp", "--split", "dev", "--json", "--no-traces", "--tracking-uri", uri, *base]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    metrics = json.loads(out.output.strip().splitlines()[-1])["metrics"]
    # per question (the critic off, no log-probabilities: P 0.5 each round): the draft, its retrieval repair
    assert metrics["n"] == 2 and metrics["em"] == 0.5 and metrics["lm_calls_per_q"] == 2
    assert metrics["critic_n_critiques"] == 4  # two judged rounds a question
    first_calls = scripted.calls
    assert first_calls == 4

    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.params["system"] == "sharp" and runs[0].data.params["config.k_schedule"] == "[3, 5]"
    assert runs[0].data.metrics["em"] == 0.5
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(runs[0].info.run_id)}
    assert {"questions.json", "program_state.json", "summary.json", "results"} <= names

    again = CliRunner().invoke(app, args)  # resumes from the results file: no LM call
    assert again.exit_code == 0 and scripted.calls == first_calls


def test_a_corpus_without_a_shipped_program_gets_the_ranked_plain_read_with_a_one_line_notice(world):
    tmp_path, base, scripted = world
    base = base[:-2]  # no --program: the default for this corpus, of which none is shipped
    out = CliRunner().invoke(app, ["ask", "What nationality is the director of Pulp Fiction?", "--json", *base])
    assert out.exit_code == 0, out.output
    pred = json.loads(out.output.strip().splitlines()[-1])
    assert [s["role"] for s in pred["trace"]] == ["retriever", "generator", "judgement", "select"]  # no repair
    assert pred["stop_reason"] == "max_repairs" and pred["cost"]["lm_calls"] == 1
    notices = [ln for ln in out.stderr.splitlines() if "no shipped SHARP program" in ln]
    assert len(notices) == 1 and "ranked plain read" in notices[0] and "sharp-hotpotqa" not in notices[0]


def test_ask_json_and_a_down_tracking_server(world):
    tmp_path, base, _ = world
    out = CliRunner().invoke(app, ["ask", "What nationality is the director of Pulp Fiction?", "--json", *base])
    assert out.exit_code == 0, out.output
    pred = json.loads(out.output.strip().splitlines()[-1])
    assert pred["answer"] == "American" and pred["system"] == "sharp" and pred["cost"]["lm_calls"] == 2
    draft = ["retriever", "generator", "judgement"]
    assert [s["role"] for s in pred["trace"]] == [*draft, *draft, "select"]  # the draft, a retrieval repair
    # with the critic asked (in the band of the gate's P), it supports the draft: no repair
    pred = json.loads(
        CliRunner()
        .invoke(app, ["ask", "Who directed Pulp Fiction?", "--json", "--set", "ask_critic=band", *base])
        .output.strip()
        .splitlines()[-1]
    )
    assert [s["role"] for s in pred["trace"]] == ["retriever", "generator", "critic", "judgement", "select"]
    down = CliRunner().invoke(app, ["eval", "--tracking-uri", "http://127.0.0.1:9", *base])
    assert down.exit_code == 2 and "not reachable" in down.output


def test_bad_config_key_is_named(world):
    _, base, _ = world
    out = CliRunner().invoke(app, ["ask", "q?", "--set", "treshold=0.3", *base])
    assert out.exit_code == 2 and "unknown key 'treshold'" in out.output
