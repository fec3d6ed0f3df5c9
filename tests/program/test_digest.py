"""The one digest: saved programs, calibrators and results files are named or checked by it, so its
value for a given object must not drift (a drift re-runs every resumable job and refuses every saved file)."""

from __future__ import annotations

import datetime
from pathlib import Path

from program.digest import digest


def test_the_value_is_pinned():
    # sha256 of '{"a": "x", "b": [1, 2]}': sorted keys, json.dumps' default separators
    assert digest({"b": [1, 2], "a": "x"}) == "5125d018f84d57c49a8d3c2cfa6063d23cc3f4cd7ff13f4fdedfa2c1d3162f30"


def test_key_order_does_not_matter_and_values_do():
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert digest({"a": 1, "b": 2}) != digest({"a": 1, "b": 3})
    assert digest(["q1", "q2"]) != digest(["q2", "q1"])  # lists keep their order


def test_length_cuts_the_hex_digest():
    full = digest(["q1", "q2"])
    assert len(full) == 64
    assert digest(["q1", "q2"], 12) == full[:12] and digest(["q1", "q2"], 16) == full[:16]


def test_objects_json_cannot_write_are_digested_as_their_text():
    when, path = datetime.date(2026, 1, 2), Path("/a")
    assert digest({"when": when, "path": path}) == digest({"when": "2026-01-02", "path": "/a"})
