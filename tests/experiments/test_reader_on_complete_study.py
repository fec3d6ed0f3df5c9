"""The reader-on-complete-evidence study counts only shared questions and the ones complete for every system."""

from __future__ import annotations

import json

import pytest

from experiments.lab.studies.reader_on_complete import main, reader_on_complete


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_em_on_own_and_common_complete_evidence(tmp_path, capsys):
    a = write(
        tmp_path / "a.jsonl",
        [
            {"id": "q1", "em": 1.0, "all_gold": 1.0},
            {"id": "q2", "em": 0.0, "all_gold": 1.0},
            {"id": "q3", "em": 1.0, "all_gold": 0.0},
            {"id": "q9", "em": 1.0, "all_gold": 1.0},  # only in a: not counted
        ],
    )
    b = write(
        tmp_path / "b.jsonl",
        [
            {"id": "q1", "em": 0.0, "all_gold": 1.0},
            {"id": "q2", "em": 0.0, "all_gold": 0.0},
            {"id": "q3", "em": 1.0, "all_gold": 1.0},
        ],
    )
    out = reader_on_complete({"a": a, "b": b})
    assert (out["shared_questions"], out["complete_for_all"]) == (3, 1)
    assert out["systems"]["a"] == {"complete": 2, "em_on_own_complete": 0.5, "em_on_complete_for_all": 1.0}
    assert out["systems"]["b"] == {"complete": 2, "em_on_own_complete": 0.5, "em_on_complete_for_all": 0.0}
    assert main([f"a={a}", f"b={b}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == out


def test_a_missing_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([f"a={tmp_path / 'nope.jsonl'}"])
    assert "nope.jsonl" in capsys.readouterr().err
