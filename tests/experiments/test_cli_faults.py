"""`sharp eval`, `ask` and `arena` against a real fake OpenAI server that fails: failed questions are
counted, logged to MLflow, exit non-zero with the cause and are retried by a rerun; a server that is
down is reported before any index, dataset or model is touched."""

from __future__ import annotations

import json

import dspy
import pytest
import yaml
from doubles import KeywordRetriever
from fake_openai import sharp_answer
from typer.testing import CliRunner

from experiments import runtime as rt_mod
from experiments.cli import app

Q = "What nationality is the director of Pulp Fiction?"
ROWS = [
    {
        "_id": "a1",
        "question": Q,
        "answer": "American",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [],
        "context": [["Pulp Fiction", ["Pulp Fiction is a 1994 film directed by Quentin Tarantino."]]],
    },
    {
        "_id": "a2",
        "question": "Which country was Krzysztof Kieslowski from?",
        "answer": "Poland",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [],
        "context": [["Krzysztof Kieslowski", ["A Polish film director."]]],
    },
]


@pytest.fixture
def world(tmp_path, monkeypatch, fake_openai):
    data = tmp_path / "datasets" / "hotpotqa"
    data.mkdir(parents=True)
    (data / "dev.json").write_text(json.dumps(ROWS))
    opened = []

    def retriever(self, overrides=None):
        opened.append(overrides)
        return KeywordRetriever()

    monkeypatch.setattr(rt_mod.Runtime, "retriever", retriever)
    fake_openai.answer = sharp_answer
    previous = dspy.cache  # the CLI points DSPy's cache at --cache-dir for the process: put it back after
    yield tmp_path, fake_openai, opened
    dspy.cache = previous


def lm_file(tmp_path, base: str) -> list[str]:
    path = tmp_path / f"lm-{abs(hash(base))}.yaml"
    default = {"model": "openai/test", "api_base": base, "num_retries": 1, "retry_backoff_s": 0.01, "timeout_s": 5}
    path.write_text(yaml.safe_dump({"default": default}))
    return ["--lm-config", str(path)]


def eval_args(tmp_path, base: str) -> list[str]:
    return [
        "eval",
        "--json",
        "--no-traces",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'ml.db'}",
        "--data-dir",
        str(tmp_path / "datasets"),
        "--workspace",
        str(tmp_path / "ws"),
        "--cache-dir",
        str(tmp_path / "dspy-cache"),
        *lm_file(tmp_path, base),
    ]


def metrics_of(output: str) -> dict:
    return json.loads(next(ln for ln in output.splitlines() if ln.startswith("{")))["metrics"]


@pytest.mark.parametrize("mode", ["500", "empty"])
def test_eval_against_a_failing_server_fails_its_questions_then_a_rerun_answers_them(world, mode, new_store):
    tmp_path, server, _ = world
    server.mode = mode
    new_store(tmp_path / "ml.db")  # the store eval_args names, made empty (its creation is not tested here)
    args = eval_args(tmp_path, server.base)
    failed = CliRunner().invoke(app, args)
    assert failed.exit_code == 1, failed.output
    metrics = metrics_of(failed.output)
    assert metrics["errors"] == 2 and metrics["n"] == 2
    assert "2 of 2 questions failed" in failed.output and "role generator" in failed.output
    rows = [json.loads(line) for line in next((tmp_path / "ws" / "runs").glob("*.jsonl")).read_text().splitlines()]
    assert all(r["stop_reason"] == "error" and r["error"] and r["answer"] == "" for r in rows)

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'ml.db'}")
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.data.metrics["errors"] == 2

    server.mode, sent = "ok", len(server.requests)
    fixed = CliRunner().invoke(app, args)  # the same command: resumes, and retries the failed questions
    assert fixed.exit_code == 0, fixed.output
    # for each of the 2 questions: the ranked plain read (no program is shipped for this toy corpus)
    assert len(server.requests) == sent + 2
    metrics = metrics_of(fixed.output)
    assert metrics["errors"] == 0 and metrics["em"] == 0.5


def test_ask_against_a_failing_server_exits_with_the_cause(world):
    tmp_path, server, _ = world
    server.mode = "500"
    base = ["--data-dir", str(tmp_path / "datasets"), "--no-cache", *lm_file(tmp_path, server.base)]
    out = CliRunner().invoke(app, ["ask", Q, "--json", *base])
    assert out.exit_code == 2 and "server error after 2 attempts" in out.output and "unknown" not in out.output
    server.mode = "ok"
    out = CliRunner().invoke(app, ["ask", Q, "--json", *base])
    assert out.exit_code == 0 and json.loads(out.output.strip().splitlines()[-1])["answer"] == "American"


@pytest.mark.parametrize("command", ["eval", "ask", "arena"])
def test_a_server_that_is_down_is_reported_before_any_work(world, closed_port_base, command):
    tmp_path, _, opened = world
    args = {
        "eval": eval_args(tmp_path, closed_port_base),
        "ask": ["ask", Q, "--data-dir", str(tmp_path / "datasets"), *lm_file(tmp_path, closed_port_base)],
        "arena": [
            "arena",
            "--systems",
            "sharp",
            "--no-tracking",
            "--workspace",
            str(tmp_path / "ws"),
            "--data-dir",
            str(tmp_path / "datasets"),
            *lm_file(tmp_path, closed_port_base),
        ],
    }[command]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2, out.output
    text = " ".join(out.output.split())
    assert f"no LM server answers at {closed_port_base}" in text and "sharp lm serve" in text
    assert opened == [] and not (tmp_path / "ws").exists() and not (tmp_path / "ml.db").exists()
