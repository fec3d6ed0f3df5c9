"""The `sharp` command line. Each area registers its commands from experiments/commands/."""

from __future__ import annotations

import importlib
import os
import signal
from pathlib import Path

import typer

from experiments.console import logs

# Offline by default: no hub, no LiteLLM price-table fetch, no telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

app = typer.Typer(
    help="SHARP: self-correcting multi-hop QA in DSPy. Index a corpus, ask, evaluate, compile, tune.",
    no_args_is_help=True,
    add_completion=False,
)

# Modules under experiments/commands that define `register(app)`.
COMMAND_MODULES = ["data", "lm", "program", "arena", "compile", "tune", "build", "fitting", "report", "ui"]


@app.callback()
def _root(
    ctx: typer.Context,
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Every log record on the console, at DEBUG level (libraries' too)."
    ),
    log_file: Path | None = typer.Option(
        None,
        "--log-file",
        envvar="SHARP_LOG_FILE",
        help="Write the full log here (default: WORKSPACE/logs/sharp.log). The console shows warnings and progress.",
    ),
) -> None:
    if not verbose:  # the libraries' own progress bars (transformers' "Loading weights"): ours say more
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logs.configure(verbose, log_file, ctx.invoked_subcommand)


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"experiments.commands.{_name}")
    except ModuleNotFoundError as exc:  # an area not written yet
        if exc.name != f"experiments.commands.{_name}":
            raise
        continue
    _mod.register(app)


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (``kill``, a scheduler, a CI timeout) unwind like Ctrl-C: MLflow runs end KILLED
    instead of staying RUNNING, and result files and Optuna studies are left resumable."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    interrupt_on_sigterm()
    app()


if __name__ == "__main__":
    main()
