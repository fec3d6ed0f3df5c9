"""A full disk or a read-only results folder stops `evaluate` with a StorageError naming the file, and
leaves nothing behind that spoils the resume: no half row, no half-rewritten results or meta file."""

from __future__ import annotations

import errno
import json
import textwrap

import dspy
import pytest
from read_only import chmod_tree, run_python, unprivileged

import optimize.evaluate as ev
from optimize.evaluate import evaluate
from program.errors import StorageError
from program.types import Passage


def examples(n=4):
    return [
        dspy.Example(id=f"q{i}", question=f"question {i}?", answer=f"a{i}", gold_titles=[f"T{i}"]).with_inputs(
            "question"
        )
        for i in range(n)
    ]


class Right:
    def __init__(self):
        self.asked = []

    def __call__(self, question):
        self.asked.append(question)
        i = question.split()[1].rstrip("?")
        return dspy.Prediction(answer=f"a{i}", passages=[Passage("x", f"T{i}", "t")], trace=[], cost={})


def test_disk_full_mid_row_leaves_no_half_row_and_resumes(tmp_path, monkeypatch):
    path = tmp_path / "runs" / "r.jsonl"
    real_write, calls = ev.os.write, []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) == 3:  # the third row: half of it lands, then the disk is full
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(ev.os, "write", write)
    with pytest.raises(StorageError, match=rf"cannot write {path}: No space left on device.*resumes"):
        evaluate(Right(), examples(), path, progress=False, meta={"system": "right"})
    lines = path.read_text().splitlines(keepends=True)
    assert [json.loads(line)["id"] for line in lines] == ["q0", "q1"] and all(x.endswith("\n") for x in lines)
    monkeypatch.setattr(ev.os, "write", real_write)  # space again: the same call resumes
    system = Right()
    res = evaluate(system, examples(), path, progress=False, meta={"system": "right"})
    assert system.asked == ["question 2?", "question 3?"] and res.metrics["em"] == 1.0
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["q0", "q1", "q2", "q3"]


def test_disk_full_while_rewriting_on_resume_keeps_the_file(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    evaluate(Right(), examples(2), path, progress=False, meta={"system": "right"})
    before = path.read_text()

    def full(self, text, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ev.Path, "write_text", full)
    with pytest.raises(StorageError, match="No space left"):
        evaluate(Right(), examples(4), path, progress=False, meta={"system": "right"})
    assert path.read_text() == before and not list(tmp_path.glob(".*.tmp"))


def test_meta_file_is_never_half_written(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"

    def full(self, text, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ev.Path, "write_text", full)
    with pytest.raises(StorageError, match="r.meta.json"):
        evaluate(Right(), examples(2), path, progress=False, meta={"system": "right"})
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    assert evaluate(Right(), examples(2), path, progress=False, meta={"system": "right"}).metrics["n"] == 2


def test_read_only_results_folder_fails_before_any_question(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    chmod_tree(runs, writable=False)
    try:
        prefix = unprivileged(runs)
        code = textwrap.dedent(f"""
            import dspy
            from optimize.evaluate import evaluate
            from program.errors import StorageError
            asked = []
            def system(question):
                asked.append(question)
                return dspy.Prediction(answer="a", passages=[], trace=[], cost={{}})
            ex = [dspy.Example(id="q0", question="q?", answer="a").with_inputs("question")]
            try:
                evaluate(system, ex, {str(runs / "r.jsonl")!r}, progress=False, meta={{"s": 1}})
            except StorageError as exc:
                print("STORAGE", len(asked), exc)
        """)
        done = run_python(prefix, code)
    finally:
        chmod_tree(runs, writable=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("STORAGE 0 ") and str(runs) in done.stdout and "writable" in done.stdout
    assert list(runs.iterdir()) == []
