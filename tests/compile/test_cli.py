"""The `compile`, `tune` and `export` commands: bad input is a clear error before any expensive work."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from experiments.commands import compile as compile_commands
from experiments.commands import tune as tune_commands


@pytest.fixture
def cli():
    app = typer.Typer()
    compile_commands.register(app)
    tune_commands.register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


@pytest.mark.parametrize(
    "args,message",
    [
        (("compile", "--optimizer", "miprov3"), "unknown optimizer 'miprov3'"),
        (("compile", "--optimizer", "mipro", "--n-train", "3"), "needs at least 8 training examples, got 3"),
        (("compile", "--n-val", "0"), "--n-val must be at least 1"),
        (("compile", "--metric", "rouge"), "unknown metric 'rouge'"),
        (("compile", "--target", "plans"), "unknown target 'plans'"),
        (("tune", "--objective", "bleu"), "unknown objective 'bleu'"),
        (("tune", "--system", "vanilla"), "has none"),
        (("tune", "--fix", "treshold=0.5"), "unknown parameter"),
        (("tune", "--objective", "f1", "--max-calls", "3"), "the f1 objective prices no LM call"),
        (("tune", "--objective", "f1-cost", "--cost-weight", "0.1"), "the f1-cost objective prices no LM call"),
        (("tune", "--max-calls", "0.5"), "max_calls"),
    ],
)
def test_bad_input_fails_fast_with_a_message(cli, args, message):
    result = cli(*args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_export_of_a_missing_run_and_a_down_tracking_server(cli, tmp_path, mlflow_store):
    result = cli("export", "nope", "--name", "x", "--workspace", str(tmp_path), "--tracking-uri", mlflow_store.uri)
    assert result.exit_code == 2 and "no run 'nope'" in result.output
    result = cli("export", "nope", "--name", "x", "--workspace", str(tmp_path), "--tracking-uri", "http://127.0.0.1:9")
    assert result.exit_code == 2 and "not reachable" in result.output


def test_tune_help_states_the_em_cost_objective_s_own_call_cost(cli):
    from optimize.policy_search import CallCost

    said = " ".join(cli("tune", "--help").output.split())
    cost = CallCost()
    assert f"(default: {cost.weight:g})" in said and f"; default: {cost.max_calls:g})" in said


def test_the_call_cost_of_the_command_line():
    from experiments.commands.tune import call_cost

    assert call_cost(None, None) is None  # neither given: the objective's own
    assert call_cost(0.1, None).record() == {"weight": 0.1, "max_calls": 2.0}  # the other keeps its default
    assert call_cost(None, 3.0).record() == {"weight": 0.02, "max_calls": 3.0}
    assert call_cost(None, 3.0).model_copy(update={"floors": {"yesno": 0.5}}).record()["floors"] == {"yesno": 0.5}
