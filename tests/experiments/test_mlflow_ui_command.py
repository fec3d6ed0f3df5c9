"""`sharp mlflow-ui`'s command line, without starting anything (tests/servers/test_mlflow_ui.py starts it)."""

from __future__ import annotations

from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app


def test_the_ui_runs_without_mlflow_s_job_runner_unless_the_user_asks(monkeypatch):
    monkeypatch.delenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", raising=False)
    argv, env = tracking.ui_command("sqlite:////ws/mlflow.db", "127.0.0.1", 5001)
    assert argv[1:] == [
        "-m", "mlflow", "ui", "--backend-store-uri", "sqlite:////ws/mlflow.db",
        "--workers", "1", "--host", "127.0.0.1", "--port", "5001",
    ]  # fmt: skip
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    monkeypatch.setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "true")  # the user's setting is theirs
    assert tracking.ui_command("sqlite:////ws/mlflow.db")[1]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"


def test_a_tracking_server_has_its_own_ui(tmp_path):
    url = "http://sharp:S3cret@127.0.0.1:5000"
    res = CliRunner().invoke(app, ["mlflow-ui", "--workspace", str(tmp_path), "--tracking-uri", url])
    assert res.exit_code == 2 and "is a tracking server" in res.output and "S3cret" not in res.output
