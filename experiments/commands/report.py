"""`sharp report arena-table | compare-runs`: tables from finished arenas and evaluation runs (no model, no MLflow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from experiments import options as o

report_app = typer.Typer(
    help="Tables from finished work: an arena's summary, evaluation runs compared (no model, no MLflow).",
    no_args_is_help=True,
)


@report_app.command("arena-table", cls=o.Command)
def arena_table(
    summary: Path = typer.Argument(..., help="summary.json of an arena report (workspace/reports/arena-…/)."),
    common: bool = typer.Option(False, "--common", help="Only the questions every system answered."),
    critic: bool = typer.Option(False, "--critic", help="The critic-calibration table instead."),
) -> None:
    """The arena's Markdown table: EM, F1, all-gold, ΔEM with its paired CI, cost per question."""
    from experiments.reports import tables as t

    data = t.common_summary(summary) if common else t.read_summary(summary)  # ReportInputError: the error exit
    sys.stdout.write((t.critic_table(data) if critic else t.arena_table(data)) + "\n")


@report_app.command("compare-runs", cls=o.Command)
def compare_runs(
    results: list[Path] = typer.Argument(
        ..., help="Results JSONL files (workspace/runs/…); the first is the baseline."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the Markdown table."),
) -> None:
    """Evaluation runs on the questions they share: metrics, cost, paired differences against the first."""
    from experiments.reports import tables as t

    result = t.compare_runs(results)
    sys.stdout.write((json.dumps(result, default=str) if as_json else t.compare_markdown(result)) + "\n")


def register(app: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
