"""The README's arena table from a report's summary.json."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks import arena_table
from experiments.report import write_report


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


def test_table_rows_follow_the_summary(tmp_path, capsys):
    _, summary = write_report(
        tmp_path,
        {
            "vanilla": rows([1, 0, 0, 1], calls=1, tokens=900),
            "sharp": rows([1, 1, 0, 1], calls=3, seconds=4.0, tokens=2900),
        },
        baseline="vanilla",
    )
    assert arena_table.main([str(tmp_path / "summary.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| system | n | EM | F1 | all-gold | ΔEM vs vanilla")
    assert out[2].startswith("| vanilla | 4 | 0.50 | 0.500 |") and "| - |" in out[2]
    sharp = out[3]
    assert sharp.startswith("| sharp | 4 | 0.75 |") and "+0.25 [" in sharp and "| 3.00 | 2,910 | 4.0 | 0% |" in sharp
    assert json.loads((tmp_path / "summary.json").read_text())["systems"]["sharp"]["metrics"]["n"] == 4


def test_unreadable_summary_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "summary.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit):
        arena_table.main([str(bad)])
    assert "cannot read" in capsys.readouterr().err


def test_common_restricts_every_system_to_the_questions_all_answered(tmp_path, capsys):
    folder = tmp_path / "arena"
    data = {"vanilla": rows([1, 0, 0, 1], calls=1), "crag": rows([1, 1], calls=5)}  # crag stopped after 2
    (folder / "results").mkdir(parents=True)
    for name, got in data.items():
        (folder / "results" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in got))
    write_report(folder / "compiled", data, baseline="vanilla")  # a report in a subfolder (--report)
    assert arena_table.main(["--common", str(folder / "compiled" / "summary.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| vanilla | 2 | 0.50 |")  # q0, q1 only: the questions crag answered
    assert out[3].startswith("| crag | 2 | 1.00 |") and "+0.50 [" in out[3]


def test_critic_table_says_when_no_system_has_critiques(tmp_path, capsys):
    write_report(tmp_path, {"vanilla": rows([1, 0], calls=1)}, baseline="vanilla")
    assert arena_table.main(["--critic", str(tmp_path / "summary.json")]) == 0
    assert capsys.readouterr().out.strip() == "(no system with critiques)"
