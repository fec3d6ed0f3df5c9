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


class DownThenUp:
    """A system whose LM service is down for the first ``down`` calls (it raises as SHARP then does)."""

    def __init__(self, down: int):
        self.down, self.asked = down, []

    def __call__(self, question):
        from program.errors import LMUnavailableError

        self.asked.append(question)
        if len(self.asked) <= self.down:
            raise LMUnavailableError("cannot reach openai/local at http://127.0.0.1:1/v1: refused")
        i = int(question.split()[1].rstrip("?"))
        return dspy.Prediction(answer=f"a{i}", passages=[], trace=[], cost={"lm_calls": 1}, stop_reason="sufficient")


def test_failed_questions_are_counted_and_retried_by_a_resumed_run(tmp_path):
    path = tmp_path / "r.jsonl"
    res = evaluate(DownThenUp(down=3), examples(3), path, progress=False)
    assert res.metrics["errors"] == 3 and res.metrics["em"] == 0.0
    assert all(r["stop_reason"] == "error" and r["error"].startswith("LMUnavailableError") for r in res.rows)

    system = DownThenUp(down=0)
    again = evaluate(system, examples(3), path, progress=False)
    assert len(system.asked) == 3  # every failed question asked again, none taken as done
    assert again.metrics["errors"] == 0 and again.metrics["em"] == 1.0
    rows = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}  # the last row of each id wins
    assert all(r["error"] is None for r in rows.values())


def test_rows_of_older_runs_answered_after_a_service_failure_are_retried(tmp_path):
    """Before failed questions existed, a dead server left rows answered "unknown" with the failure in a step."""
    path = tmp_path / "r.jsonl"
    evaluate(EchoSystem(), examples(2), path, progress=False)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1].update(
        answer="unknown",
        em=0.0,
        trace=[{"role": "generator", "error": "LMProviderError: openai/x failed with a server error after 3 attempts"}],
    )
    rows[0]["trace"] = [{"role": "critic", "error": "AdapterParseError: garbage"}]  # a weak model: answered
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    system = EchoSystem()
    res = evaluate(system, examples(2), path, progress=False)
    assert system.asked == ["question 1?"] and res.metrics["errors"] == 0


def test_a_run_stops_after_several_failures_in_a_row_and_keeps_the_rows(tmp_path):
    from program.errors import RunAbortedError

    path = tmp_path / "r.jsonl"
    system = DownThenUp(down=100)
    with pytest.raises(RunAbortedError, match=r"4 questions in a row failed.*LMUnavailableError.*rerun") as info:
        evaluate(system, examples(10), path, progress=False, max_failed_in_a_row=4)
    assert len(system.asked) == 4 and str(path) in str(info.value)
    assert len(path.read_text().splitlines()) == 4
    down_then_up = DownThenUp(down=3)  # failures that a success interrupts do not stop a run
    res = evaluate(down_then_up, examples(10), None, progress=False, max_failed_in_a_row=4)
    assert res.metrics["errors"] == 3 and len(down_then_up.asked) == 10
