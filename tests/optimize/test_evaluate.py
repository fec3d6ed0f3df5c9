"""The evaluation runner: per-question rows, resume, mismatch refusal, errors kept."""

from __future__ import annotations

import json

import dspy
import pytest

from optimize.evaluate import ResultsMismatchError, evaluate
from program.types import Passage


def examples(n=6):
    return [
        dspy.Example(
            id=f"q{i}",
            question=f"question {i}?",
            answer=f"a{i}",
            answer_aliases=[],
            gold_titles=[f"T{i}"],
            type="bridge" if i % 2 else "comparison",
        ).with_inputs("question")
        for i in range(n)
    ]


class EchoSystem:
    """Answers right on even questions, wrong on odd; raises on 'question 3?'."""

    def __init__(self):
        self.asked = []

    def __call__(self, question):
        self.asked.append(question)
        i = int(question.split()[1].rstrip("?"))
        if i == 3:
            raise RuntimeError("boom")
        return dspy.Prediction(
            answer=f"a{i}" if i % 2 == 0 else "nope",
            passages=[Passage("x", f"T{i}", "t")],
            trace=[],
            cost={"lm_calls": 2},
            retries=0,
            stop_reason="single_shot",
        )


def test_rows_aggregates_and_errors_recorded(tmp_path):
    res = evaluate(EchoSystem(), examples(), tmp_path / "r.jsonl", progress=False)
    assert [r["id"] for r in res.rows] == [f"q{i}" for i in range(6)]
    assert res.metrics["em"] == pytest.approx(3 / 6)
    assert res.metrics["errors"] == 1
    assert next(r for r in res.rows if r["id"] == "q3")["error"].startswith("RuntimeError: boom")
    assert res.by_type["comparison"]["em"] == 1.0 and res.by_type["bridge"]["em"] == 0.0
    assert res.metrics["em_ci"][0] <= 0.5 <= res.metrics["em_ci"][1]
    assert res.metrics["lm_calls_per_q"] == pytest.approx(10 / 6)


def test_resume_skips_finished_questions_and_drops_a_cut_line(tmp_path):
    path = tmp_path / "r.jsonl"
    evaluate(EchoSystem(), examples(3), path, progress=False, meta={"system": "echo"})
    with path.open("a") as fh:
        fh.write('{"id": "q9", "cut')  # a line cut by a kill
    system = EchoSystem()
    res = evaluate(system, examples(6), path, progress=False, meta={"system": "echo"})
    assert system.asked == ["question 3?", "question 4?", "question 5?"]
    assert len(res.rows) == 6
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_other_settings_are_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    evaluate(EchoSystem(), examples(2), path, progress=False, meta={"k": 5})
    with pytest.raises(ResultsMismatchError, match="other settings"):
        evaluate(EchoSystem(), examples(2), path, progress=False, meta={"k": 7})


def test_threads_give_the_same_rows(tmp_path):
    one = evaluate(EchoSystem(), examples(), None, threads=1, progress=False)
    four = evaluate(EchoSystem(), examples(), None, threads=4, progress=False)
    assert [r["em"] for r in one.rows] == [r["em"] for r in four.rows]


def test_by_type_groups_unlabelled_questions_as_unknown():
    """184 of the 666 HotpotQA dev rows here carry "type": null; they must not show up as "None"."""
    from optimize.evaluate import by_type

    rows = [{"type": "bridge", "em": 1.0, "f1": 1.0}, {"type": None, "em": 0.0, "f1": 0.5}, {"em": 1.0, "f1": 1.0}]
    out = by_type(rows)
    assert sorted(out) == ["bridge", "unknown"]
    assert out["unknown"]["n"] == 2 and out["unknown"]["em"] == 0.5


def test_a_prefix_stage_logs_how_many_of_its_own_questions_are_done(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    evaluate(EchoSystem(), examples(5), path, progress=False)
    system = EchoSystem()
    with caplog.at_level("INFO", logger="optimize.evaluate"):
        res = evaluate(system, examples(2), path, progress=False)  # an arena stage: the first 2 of a longer file
    assert system.asked == [] and [r["id"] for r in res.rows] == ["q0", "q1"]
    assert "2 of 2 questions already done (5 rows in the file)" in caplog.text
