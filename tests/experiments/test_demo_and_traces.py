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
def store(tmp_path_factory, new_store):
    return new_store(tmp_path_factory.mktemp("mlflow") / "ml.db")


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


def scripted_run(speeds: dict[str, tuple[float, int]], priors: dict):
    """A stand-in for run_eval whose questions took scripted seconds: ``speeds[system]`` = (seconds a
    question, LM calls a question); the first question of each was answered from the LM cache (0 s), which
    no measured speed may count. Records the ETA estimate each system was given."""
    from optimize.evaluate import EvalResult

    def run_eval(rt, name, examples, split, *, prior_seconds=None, module=None, **_):
        priors[name] = prior_seconds
        seconds, calls = speeds[name]
        rows = [{"id": e.id, "em": 1.0, "lm_calls": calls, "seconds": seconds, "cached_calls": 0} for e in examples]
        rows[0].update(seconds=0.0, cached_calls=calls)
        metrics = {"n": len(rows), "em": 1.0, "seconds_per_q": sum(r["seconds"] for r in rows) / len(rows)}
        return EvalResult(rows, metrics), {"system": name}, module, rt.workspace / f"{name}.jsonl"

    return run_eval


def test_the_demo_estimates_only_from_speeds_it_measured(world, monkeypatch):
    """No time is promised before one is measured: the plan names none; SHARP's ETA until its first answer
    is plain RAG's measured seconds per LM call; the end's estimate for 100 questions is the measured
    seconds a question of both, over the 97 not answered yet, cached questions left out."""
    from experiments.console.terminal import duration
    from experiments.jobs import demo as main_job

    _, base = world
    priors: dict = {}
    monkeypatch.setattr(main_job, "run_eval", scripted_run({"vanilla": (8.9, 1), "sharp": (12.8, 2)}, priors))
    monkeypatch.setattr(main_job, "log_to_mlflow", lambda *a, **k: None)
    out = CliRunner().invoke(app, ["demo", "--limit", "3", "--no-traces", *base])
    assert out.exit_code == 0, out.output
    assert priors == {"vanilla": None, "sharp": pytest.approx(8.9)}
    assert f"about {duration(97 * (8.9 + 12.8))} here at the speeds just measured" in out.stdout
    plan = next(line for line in out.stderr.splitlines() if "plain RAG, then SHARP" in line)
    assert "measured" in plan and not any(c.isdigit() for c in plan.split("question")[1])

    # twice as slow a machine: every estimate doubles
    priors.clear()
    monkeypatch.setattr(main_job, "run_eval", scripted_run({"vanilla": (17.8, 1), "sharp": (25.6, 2)}, priors))
    out = CliRunner().invoke(app, ["demo", "--limit", "3", "--no-traces", *base])
    assert priors["sharp"] == pytest.approx(17.8)
    assert f"about {duration(97 * (17.8 + 25.6))} here" in out.stdout


def test_with_nothing_measured_the_demo_estimates_nothing(world, monkeypatch):
    from experiments.jobs import demo as main_job

    _, base = world
    priors: dict = {}
    run = scripted_run({"vanilla": (0.0, 1), "sharp": (0.0, 1)}, priors)

    def all_cached(*a, **k):
        result, *rest = run(*a, **k)
        for r in result.rows:
            r.update(seconds=0.0, cached_calls=r["lm_calls"])
        return (result, *rest)

    monkeypatch.setattr(main_job, "run_eval", all_cached)
    monkeypatch.setattr(main_job, "log_to_mlflow", lambda *a, **k: None)
    out = CliRunner().invoke(app, ["demo", "--limit", "3", "--no-traces", *base])
    assert out.exit_code == 0, out.output
    assert priors == {"vanilla": None, "sharp": None}
    assert "make run LIMIT=100" in out.stdout and "at the speeds just measured" not in out.stdout


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
