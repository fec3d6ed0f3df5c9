"""`sharp report arena-table` and `sharp report compare-runs`: tables from finished arenas and runs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from experiments.cli import app
from experiments.reports.summary import write_report
from experiments.reports.tables import compare_runs
from optimize.evaluate import cold_figures

runner = CliRunner()


def report(*args):
    return runner.invoke(app, ["report", *map(str, args)])


def rows(em_pattern, calls, seconds=1.0, tokens=100):
    return [
        {
            "id": f"q{i}",
            "question": f"question {i}",
            "type": "bridge",
            "gold": "g",
            "answer": "g" if em else "x",
            "em": float(em),
            "f1": float(em),
            "recall": 1.0,
            "precision": 0.5,
            "all_gold": 1.0,
            "retries": 0,
            "stop_reason": "done",
            "lm_calls": calls,
            "prompt_tokens": tokens,
            "completion_tokens": 10,
            "lm_seconds": 0.1,
            "seconds": seconds,
            "cached_calls": 0,
            "cost_by_role": {},
            "critic_points": [],
            "passage_ids": [],
            "trace": [],
            "error": None,
        }
        for i, em in enumerate(em_pattern)
    ]


def test_table_rows_follow_the_summary(tmp_path):
    _, summary = write_report(
        tmp_path,
        {
            "vanilla": rows([1, 0, 0, 1], calls=1, tokens=900),
            "sharp": rows([1, 1, 0, 1], calls=3, seconds=4.0, tokens=2900),
        },
        baseline="vanilla",
    )
    res = report("arena-table", tmp_path / "summary.json")
    assert res.exit_code == 0, res.output
    out = res.stdout.splitlines()
    assert out[0].startswith("| system | n | EM | F1 | all-gold | ΔEM vs vanilla")
    assert out[2].startswith("| vanilla | 4 | 0.50 | 0.500 |") and "| - |" in out[2]
    sharp = out[3]
    assert sharp.startswith("| sharp | 4 | 0.75 |") and "+0.25 [" in sharp and "| 3.00 | 2,910 | 4.0 | 0% |" in sharp
    assert json.loads((tmp_path / "summary.json").read_text())["systems"]["sharp"]["metrics"]["n"] == 4


def test_unreadable_summary_is_a_clear_error(tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text("{not json")
    res = report("arena-table", bad)
    assert res.exit_code == 2 and "cannot read" in res.stderr


def test_common_restricts_every_system_to_the_questions_all_answered(tmp_path):
    folder = tmp_path / "arena"
    data = {"vanilla": rows([1, 0, 0, 1], calls=1), "crag": rows([1, 1], calls=5)}  # crag stopped after 2
    (folder / "results").mkdir(parents=True)
    for name, got in data.items():
        (folder / "results" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
    write_report(folder / "compiled", data, baseline="vanilla")  # a report in a subfolder (--report)
    res = report("arena-table", "--common", folder / "compiled" / "summary.json")
    assert res.exit_code == 0, res.output
    out = res.stdout.splitlines()
    assert out[2].startswith("| vanilla | 2 | 0.50 |")  # q0, q1 only: the questions crag answered
    assert out[3].startswith("| crag | 2 | 1.00 |") and "+0.50 [" in out[3]


def test_critic_table_says_when_no_system_has_critiques(tmp_path):
    write_report(tmp_path, {"vanilla": rows([1, 0], calls=1)}, baseline="vanilla")
    res = report("arena-table", "--critic", tmp_path / "summary.json")
    assert res.exit_code == 0 and res.stdout.strip() == "(no system with critiques)"


def test_common_with_no_shared_question_is_a_clear_error(tmp_path):
    folder = tmp_path / "arena"
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "vanilla.jsonl").write_text(json.dumps(rows([1], calls=1)[0]) + "\n")
    write_report(folder, {"vanilla": rows([1], calls=1), "crag": rows([1], calls=5)}, baseline="vanilla")
    res = report("arena-table", "--common", folder / "summary.json")
    assert res.exit_code == 2 and "no question answered by every system" in res.stderr


# ---- compare-runs ----------------------------------------------------------------------------
def row(qid, em, seconds, cached=0):
    return {
        "id": qid,
        "type": "bridge",
        "em": em,
        "f1": em,
        "seconds": seconds,
        "cached_calls": cached,
        "lm_calls": 1,
        "prompt_tokens": 10,
        "completion_tokens": 1,
        "all_gold": 1.0,
        "recall": 1.0,
        "precision": 0.5,
        "retries": 0,
        "error": None,
        "critic_points": [],
    }


def test_cold_figures_ignore_questions_answered_from_the_cache():
    got = [row("a", 1, 10.0), row("b", 0, 0.1, cached=2), row("c", 0, 30.0), row("d", 1, 20.0)]
    assert cold_figures(got) == {
        "cold_n": 3,
        "cold_seconds_per_q": 20.0,
        "cold_seconds_median": 20.0,
        "cold_prompt_tokens_per_q": 10.0,
        "cold_completion_tokens_per_q": 1.0,
    }
    assert cold_figures([row("b", 0, 0.1, cached=1)])["cold_seconds_per_q"] is None


def two_runs(tmp_path):
    base = tmp_path / "vanilla-hotpotqa-dev-x.jsonl"
    other = tmp_path / "sharp-hotpotqa-dev-y.jsonl"
    base.write_text("\n".join(json.dumps(r) for r in [row("a", 0, 1.0), row("b", 0, 1.0), row("z", 1, 1.0)]))
    other.write_text("\n".join(json.dumps(r) for r in [row("a", 1, 4.0), row("b", 1, 2.0)]))
    return base, other


def test_compare_uses_only_shared_questions(tmp_path):
    out = compare_runs(two_runs(tmp_path))
    assert out["shared_questions"] == 2 and out["baseline"] == "vanilla"
    assert out["systems"]["vanilla"]["em"] == 0.0 and out["systems"]["sharp"]["em"] == 1.0
    assert out["systems"]["sharp"]["d_em_vs_vanilla"]["diff"] == pytest.approx(1.0)
    assert out["systems"]["sharp"]["cold_seconds_per_q"] == pytest.approx(3.0)


def test_compare_runs_command_prints_markdown_or_json(tmp_path):
    base, other = two_runs(tmp_path)
    res = report("compare-runs", base, other)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Questions shared by all runs: 2") and "| metric | vanilla | sharp |" in res.stdout
    res = report("compare-runs", base, other, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["systems"]["sharp"]["n"] == 2


def test_compare_runs_without_shared_questions_or_with_a_bad_file_fails_clearly(tmp_path):
    base, _ = two_runs(tmp_path)
    lone = tmp_path / "sharp-hotpotqa-dev-q.jsonl"
    lone.write_text(json.dumps(row("q", 1, 1.0)) + "\n")
    res = report("compare-runs", base, lone)
    assert res.exit_code == 2 and "share no question" in res.stderr
    broken = tmp_path / "crag-hotpotqa-dev-b.jsonl"
    broken.write_text("{cut")
    res = report("compare-runs", base, broken)
    assert res.exit_code == 2 and "cannot read the results file" in res.stderr


def test_the_planner_compile_says_what_its_search_tried_and_which_candidate_it_kept(capsys):
    from experiments.commands.compile import _show_search

    def search(kept):
        cands = [{"score": 0.5062, "instructions": {}, "parents": [], "found_after_metric_calls": 0},
                 {"score": 0.45, "instructions": {}, "parents": [0], "found_after_metric_calls": 110}]  # fmt: skip
        return {"candidates": cands, "kept": kept, "examples": 20, "metric_calls": 150, "full_evaluations": 2}

    _show_search(search(0))
    out = capsys.readouterr().out
    assert "2 candidate(s)" in out and "scored on 20 selection example(s): 0: 0.506, 1: 0.450; kept 0" in out
    assert "no candidate scored higher" in out
    _show_search(search(1))
    assert "no candidate scored higher" not in capsys.readouterr().out
