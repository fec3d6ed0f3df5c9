"""`sharp mlflow-ui`: the MLflow UI on the workspace's runs (what `make mlflow-ui` runs)."""

from __future__ import annotations

import os
import sys

import typer

from experiments import options as o

Store = o.TRACKING_URI.but(help="The store to show (default: the workspace's sqlite store, WORKSPACE/mlflow.db).")


@o.shared(o.WORKSPACE, Store)
def mlflow_ui(
    opts: o.Options = o.SHARED,
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (keep 127.0.0.1 unless you mean it)."),
    port: int = typer.Option(5000, "--port", "-p"),
) -> None:
    """The MLflow UI on the workspace's runs, traces and models, without MLflow's job runner (it would take
    about half a core from the evaluation you are watching). Ctrl-C or SIGTERM stops it, every process."""
    from experiments import settings, tracking
    from optimize.storage import redact_url

    store = opts.tracking_uri or tracking.default_uri(settings.workspace(opts.workspace))
    argv, env = tracking.ui_command(store, host, port)
    print(f"MLflow UI on http://{host}:{port} for {redact_url(store)}; Ctrl-C stops it", file=sys.stderr, flush=True)
    os.execve(argv[0], argv, env)  # the UI takes this process's place: a signal reaches MLflow itself


def register(app: typer.Typer) -> None:
    o.add_command(app, "mlflow-ui", mlflow_ui)
