"""Every command against a real ``mlflow server`` backed by PostgreSQL, by configuration alone (the LM is the
rule server over HTTP, the index a real one); bad credentials and a server that is down fail clearly."""

from __future__ import annotations

import json

import mlflow
import pytest
from live_servers import free_port
from typer.testing import CliRunner

from experiments.cli import app

pytestmark = pytest.mark.servers


def sharp(*args: str) -> tuple[int, str]:
    """Run ``sharp ARGS`` in this process: (exit code, stdout and stderr)."""
    out = CliRunner().invoke(app, list(args))
    return out.exit_code, out.output


def sharp_json(*args: str) -> dict:
    """The JSON line ``sharp ARGS --json`` prints on stdout (progress bars go to stderr)."""
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout.strip().splitlines()[-1])


def field(output: str, key: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in output.splitlines() if line.startswith(f"{key}:"))


def test_every_command_runs_against_a_tracking_server_on_postgresql(
    toy, toy_space, mlflow_server, rule_lm, tmp_path, postgres
):
    uri = mlflow_server.uri
    ws = toy.new_workspace(tmp_path / "ws")
    common = [*toy.args(ws, tmp_path / "cache"), "--tracking-uri", uri]

    assert sharp_json("eval", "--limit", "3", "--retriever-set", "mode=bm25", *common)["metrics"]["n"] == 3

    code, out = sharp("arena", "--systems", "sharp,vanilla", "--limit", "3", "--retriever-set", "mode=bm25", *common)
    assert code == 0, out

    compile_args = ["--optimizer", "bootstrap", "--n-train", "4", "--n-val", "3", "--retriever-mode", "bm25"]
    code, out = sharp("compile", *compile_args, "--name", "toy", "--experiment", "servers", *common)
    assert code == 0, out
    compile_run = field(out, "run")

    code, out = sharp(
        "tune", "--trials", "4", "--n", "6", "--space", str(toy_space), "--experiment", "servers",
        "--storage", postgres.create_database("optuna_cli"), *common,
    )  # fmt: skip
    assert code == 0, out
    tune_run = field(out, "run")

    code, out = sharp("export", compile_run, "--name", "toy-served", "--workspace", str(ws), "--tracking-uri", uri)
    assert code == 0, out
    assert "models:/toy-served/1" in out

    # the registered program as an arena entrant, fetched from the server
    arena = ["arena", "--systems", "vanilla", "--program", "models:/toy-served/1", "--limit", "3", "--name", "served"]
    code, out = sharp(*arena, "--retriever-set", "mode=bm25", *common)
    assert code == 0, out
    assert "toy-served-v1" in out

    question = "What nationality is the director of Pulp Fiction?"
    ask = ["ask", question, "--program", "models:/toy-served/1", *toy.args(ws), "--tracking-uri", uri]
    assert sharp_json(*ask)["answer"] == "American"

    # everything landed on the server, in PostgreSQL, and no run is left open
    client = mlflow.MlflowClient(uri)
    mine = [client.get_experiment_by_name(name).experiment_id for name in ("sharp", "servers")]
    runs = client.search_runs(mine, max_results=500)  # (other tests share the server)
    kinds = {r.data.tags.get("kind") for r in runs}
    assert {"eval", "arena", "compile", "tune", "tune-trial", "export"} <= kinds, kinds
    assert all(r.info.status == "FINISHED" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
    assert client.get_run(compile_run).data.tags["sharp.pid"]
    names = {a.path for a in client.list_artifacts(compile_run, "program")}
    assert names == {"program/toy.json"}
    assert "plots" in {a.path for a in client.list_artifacts(tune_run)}
    assert client.get_model_version("toy-served", "1").tags["source_run"] == compile_run
    import psycopg

    with psycopg.connect(postgres.url("mlflow")) as conn:
        stored = {row[0] for row in conn.execute("select run_uuid from runs")}
    assert {r.info.run_id for r in runs} <= stored


def test_a_wrong_database_password_is_a_clear_error_that_never_shows_it(toy, postgres, rule_lm, tmp_path, new_store):
    secret = "Wr0ng-" + postgres.password[::-1]
    bad_store = postgres.url("mlflow", password=secret)
    before = rule_lm.requests
    code, out = sharp(
        "eval", "--limit", "1", *toy.args(toy.new_workspace(tmp_path / "ws")), "--tracking-uri", bad_store
    )
    assert code == 2
    assert "password authentication failed" in out and "check the user name and password" in out
    assert f"sharp:***@127.0.0.1:{postgres.port}/mlflow" in " ".join(out.split())
    assert secret not in out and postgres.password not in out
    assert rule_lm.requests == before  # refused before any LM call

    code, out = sharp(
        "tune", "--trials", "1", "--n", "2", "--storage", postgres.url("optuna", password=secret),
        *toy.args(toy.new_workspace(tmp_path / "ws")), "--tracking-uri", new_store(tmp_path / "ml.db"),
    )  # fmt: skip
    assert code == 2 and "password authentication failed" in out
    assert secret not in out and postgres.password not in out


def test_a_postgresql_tracking_uri_works_directly(toy, postgres, tmp_path):
    store = postgres.create_database("direct")
    ws = toy.new_workspace(tmp_path / "ws")
    code, out = sharp(
        "eval",
        "--limit",
        "2",
        "--json",
        "--no-traces",
        "--retriever-set",
        "mode=bm25",
        *toy.args(ws),
        "--tracking-uri",
        store,
    )
    assert code == 0, out
    mlflow.set_tracking_uri(store)
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "FINISHED" and run.data.metrics["n"] == 2


@pytest.mark.parametrize(
    "command",
    [
        ["eval"],
        ["compile"],
        ["tune"],
        ["arena"],
        ["export", "some-run", "--name", "m"],
        ["ask", "q?", "--program", "models:/m/1"],
    ],
    ids=lambda c: c[0],
)
def test_a_tracking_server_that_is_down_fails_before_any_work(toy, rule_lm, tmp_path, command):
    down = f"http://127.0.0.1:{free_port()}"
    before = rule_lm.requests
    ws = toy.new_workspace(tmp_path / "ws")
    args = ["--workspace", str(ws)] if command[0] == "export" else toy.args(ws)
    code, out = sharp(*command, *args, "--tracking-uri", down)
    assert code == 2, out
    assert f"MLflow tracking server {down} is not reachable" in " ".join(out.split())
    assert rule_lm.requests == before
