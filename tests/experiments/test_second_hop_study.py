"""The second-hop benchmark's grid scores what HopRetriever returns, setting for setting."""

from __future__ import annotations

import dspy
import pytest
from doubles import RankedRetriever
from doubles import ranked_passage as P

from experiments.lab.studies.second_hop import GRID, all_gold, grid
from program.retrieval.hop import HopRetriever


def ex(q: str, gold: list[str]) -> dspy.Example:
    return dspy.Example(question=q, gold_titles=gold, type="bridge")


RANKED = {
    "q1": ["a", "b", "c", "d", "e", "f"],
    "q2": ["m", "n", "o", "p", "r", "s"],
    "q1 A.": ["a", "x", "y"],
    "q1 B.": ["z", "x"],
    "q2 M.": ["m", "n"],
    "q2 N.": ["w"],
}
EXAMPLES = [ex("q1", ["A", "X"]), ex("q2", ["M", "W"])]


def test_all_gold_needs_every_gold_title():
    assert all_gold(EXAMPLES, [[P("a"), P("x")], [P("m")]]) == 0.5


@pytest.mark.parametrize("keep", GRID["hop_keep"])
@pytest.mark.parametrize("seeds", GRID["hop_seeds"])
def test_grid_rows_match_the_retriever(keep, seeds):
    rows = grid(RankedRetriever(RANKED), EXAMPLES, depth=20, rrf_k=5)
    base = rows.pop()
    assert base["hop_keep"] is None and base["all_gold@5"] == 0.0  # x and w are not in the questions' top 5
    row = next(r for r in rows if (r["hop_keep"], r["hop_seeds"], r["hop_seed_chars"]) == (keep, seeds, 300))
    hop = HopRetriever(RankedRetriever(RANKED), keep=keep, seeds=seeds, seed_chars=300)
    assert row["all_gold@5"] == all_gold(EXAMPLES, hop.retrieve_many(["q1", "q2"], 5))
    assert max(r["all_gold@5"] for r in rows) == 1.0  # two seeds find both bridges
    assert len(rows) == len(GRID["hop_keep"]) * len(GRID["hop_seeds"]) * len(GRID["hop_seed_chars"])
