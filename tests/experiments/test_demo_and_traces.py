"""The main job (`sharp demo`) and `sharp arena` record one DSPy trace per question in MLflow, like
`sharp eval`, under each system's run; --no-traces records none. The demo prints each system's headline as
it finishes, then the comparison and how to run it larger."""

from __future__ import annotations

import itertools
import json

import mlflow
import pytest
from doubles import KeywordRetriever, ScriptedLM, assign
from typer.testing import CliRunner

from experiments import runtime as rt_mod
from experiments import tracking
from experiments.cli import app


def run_traces(run_id: str) -> list:
    """The traces recorded under one run (what the MLflow UI lists in that run's Traces tab)."""
    client = mlflow.tracking.MlflowClient()
    experiment = client.get_run(run_id).info.experiment_id
    out, token = [], None
    while True:
        page = client.search_traces(
            locations=[experiment], run_id=run_id, include_spans=False, page_token=token, flush=True
        )
        out += list(page)
        token = getattr(page, "token", None)
        if not token:
            return out


ROWS = [
    {
        "_id": f"a{i}",
        "question": q,
        "answer": a,
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [[t, 0]],
        "context": [[t, [text]]],
    }
    for i, (q, a, t, text) in enumerate(
        [
            (
                "What nationality is the director of Pulp Fiction?",
                "American",
                "Quentin Tarantino",
                "Quentin Tarantino is an American film director.",
            ),
            (
                "Which country was Krzysztof Kieslowski from?",
                "Poland",
                "Krzysztof Kieslowski",
                "Krzysztof Kieslowski was a Polish film director.",
            ),
            ("Which city is the capital of France?", "Paris", "Paris", "Paris is the capital of France."),
        ]
    )
]


def give(module, lm_config):
    planner, critic, generator = (ScriptedLM(r, []) for r in ("planner", "critic", "generator"))
    planner.answers = itertools.repeat({"sub_questions": ["Who directed the film?", "Where is the director from?"]})
    critic.answers = itertools.repeat({"verdict": "supported", "confidence": 0.9})
    generator.answers = itertools.repeat({"answer": "American", "supporting_passages": [1]})
    assign(module, {"planner": planner, "critic": critic, "generator": generator})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'ml.db'}"


@pytest.fixture
def world(tmp_path, monkeypatch, store):
    data = tmp_path / "datasets" / "hotpotqa"
    data.mkdir(parents=True)
    (data / "dev.json").write_text(json.dumps(ROWS))
    monkeypatch.setattr(rt_mod, "assign_lms", give)
    monkeypatch.setattr(rt_mod.Runtime, "retriever", lambda self, overrides=None: KeywordRetriever())
    monkeypatch.setenv("SHARP_LOG_FILE", str(tmp_path / "sharp.log"))
    yield (
        tmp_path,
        ["--data-dir", str(tmp_path / "datasets"), "--workspace", str(tmp_path / "ws"), "--tracking-uri", store],
    )
    from experiments.console import logs

    logs.reset()
    tracking.disable_dspy_traces()


def runs_of(store, kind):
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    parent = max((r for r in runs if r.data.tags.get("kind") == kind), key=lambda r: r.info.start_time)
    nested = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, {r.data.tags["system"]: r for r in nested}


def test_demo_records_a_trace_per_question_in_each_system_run_and_says_what_next(world, store):
    tmp_path, base = world
    out = CliRunner().invoke(app, ["demo", "--limit", "2", *base])
    assert out.exit_code == 0, out.output
    parent, nested = runs_of(store, "demo")
    assert sorted(nested) == ["sharp", "vanilla"] and parent.info.status == "FINISHED"
    for name, run in nested.items():
        traces = run_traces(run.info.run_id)
        assert len(traces) == 2, {n: len(run_traces(r.info.run_id)) for n, r in nested.items()}
        assert run.data.params["system"] == name and "em" in run.data.metrics
    assert run_traces(parent.info.run_id) == []

    stdout = out.stdout
    # each system's headline as soon as it finished, then the comparison, then how to run it larger
    first, second, both = (stdout.index(s) for s in ("plain RAG (vanilla): 2", "SHARP (sharp): 2", "SHARP vs plain"))
    assert first < second < both
    assert "make run LIMIT=100" in stdout and "sharp demo --limit 100" in stdout
    assert "a trace per question" in stdout and f"full log: {tmp_path / 'sharp.log'}" in stdout
    err = out.stderr
    assert "plain RAG (vanilla): 2/2 questions" in err and "SHARP (sharp): 2/2 questions" in err
    assert "SHARP (sharp): 0/2 questions, 0s elapsed, ETA ~" in err  # estimated from plain RAG's speed


def test_demo_without_traces_records_none(world, store):
    _, base = world
    out = CliRunner().invoke(app, ["demo", "--limit", "1", "--no-traces", *base])
    assert out.exit_code == 0, out.output
    _, nested = runs_of(store, "demo")
    assert all(run_traces(r.info.run_id) == [] for r in nested.values())
    assert "a trace per question" not in out.stdout


def test_the_default_sample_is_small():
    import inspect

    from experiments.commands.program import demo

    assert inspect.signature(demo).parameters["limit"].default.default == 5


def test_arena_records_a_trace_per_question_in_each_system_run(world, store):
    _, base = world
    out = CliRunner().invoke(app, ["arena", "--systems", "vanilla,sharp", "--limit", "3", "--json", *base])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["ran"] == ["vanilla", "sharp"]  # stdout: the one JSON object
    _, nested = runs_of(store, "arena")
    assert {name: len(run_traces(r.info.run_id)) for name, r in nested.items()} == {"vanilla": 3, "sharp": 3}

    again = CliRunner().invoke(
        app, ["arena", "--systems", "vanilla", "--limit", "2", "--name", "untraced", "--no-traces", *base]
    )
    assert again.exit_code == 0, again.output
    _, nested = runs_of(store, "arena")
    assert run_traces(nested["vanilla"].info.run_id) == []
