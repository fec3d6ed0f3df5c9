"""Weighted reciprocal rank fusion, checked by hand; HybridRetriever over fixed lists."""

from __future__ import annotations

import pytest

from program.errors import ConfigError, QuestionError
from program.retrieval import HybridRetriever, RetrieverConfig, rrf_fuse
from program.retrieval.bm25 import LexicalTokenizer, top_k
from program.types import Passage


def P(pid: str) -> Passage:
    return Passage(pid, pid.upper(), f"text of {pid}")


def test_rrf_hand_checked():
    dense = [P("a"), P("b"), P("c")]
    bm25 = [P("c"), P("a"), P("d")]
    out = rrf_fuse([dense, bm25], [1.0, 1.0], rrf_k=1, k=4)
    # a: 1/2 + 1/3 = .8333 ; c: 1/4 + 1/2 = .75 ; b: 1/3 ; d: 1/4
    assert [p.id for p in out] == ["a", "c", "b", "d"]
    assert [round(p.score, 4) for p in out] == [0.8333, 0.75, 0.3333, 0.25]


def test_rrf_weights_change_the_order():
    dense, bm25 = [P("a"), P("b")], [P("b"), P("a")]
    # equal weights: a = b = 1/61 + 1/62; tie broken by best rank (both 1) then id -> a first
    assert [p.id for p in rrf_fuse([dense, bm25], [1, 1], 60, 2)] == ["a", "b"]
    # bm25 heavier: b = 2/61 + 1/62 > a = 1/61 + 2/62
    assert [p.id for p in rrf_fuse([dense, bm25], [1, 2], 60, 2)] == ["b", "a"]
    only_dense = rrf_fuse([dense, bm25], [1, 0], 60, 2)
    assert [p.id for p in only_dense] == ["a", "b"] and only_dense[0].score == pytest.approx(1 / 61)


def test_rrf_tie_break_by_best_rank_then_id():
    # x at ranks (1, 3) vs y at ranks (2, 2) with k=0: 1 + 1/3 = 1.333 vs 1/2 + 1/2 = 1.0 -> x
    out = rrf_fuse([[P("x"), P("y")], [P("z"), P("y"), P("x")]], [1, 1], 0, 3)
    assert [p.id for p in out] == ["x", "z", "y"]
    # exact tie with same best rank: id order
    out = rrf_fuse([[P("b")], [P("a")]], [1, 1], 60, 2)
    assert [p.id for p in out] == ["a", "b"]


def test_rrf_keeps_first_passage_object_and_counts_repeats_once():
    out = rrf_fuse([[P("a"), P("a")], []], [1, 1], 0, 5)
    assert len(out) == 1 and out[0].score == pytest.approx(1.0) and out[0].text == "text of a"
    with pytest.raises(ConfigError):
        rrf_fuse([[P("a")]], [1, 1], 60, 1)


class Fixed:
    def __init__(self, ranking):
        self.ranking, self.calls = ranking, []

    def retrieve(self, query, k):
        return self.retrieve_many([query], k)[0]

    def retrieve_many(self, queries, k):
        self.calls.append((list(queries), k))
        return [list(self.ranking[:k]) for _ in queries]


def test_hybrid_uses_candidate_depth_and_weights():
    dense, bm25 = Fixed([P("a"), P("b"), P("c")]), Fixed([P("c"), P("d")])
    h = HybridRetriever(dense, bm25, dense_weight=1, bm25_weight=1, rrf_k=0, candidate_depth=50)
    out = h.retrieve_many(["q1", "q2"], 2)
    assert [[p.id for p in hits] for hits in out] == [["c", "a"], ["c", "a"]]  # c: 1/3 + 1 ; a: 1
    assert dense.calls == [(["q1", "q2"], 50)] and bm25.calls == [(["q1", "q2"], 50)]
    with pytest.raises(QuestionError):
        h.retrieve("", 3)


def test_config_validation():
    with pytest.raises(ConfigError, match="unknown key 'rrf'"):
        RetrieverConfig.from_mapping({"rrf": 3})
    with pytest.raises(ConfigError, match="mode"):
        RetrieverConfig.from_mapping({"mode": "sparse"})
    with pytest.raises(ConfigError, match="dense_weight"):
        RetrieverConfig.from_mapping({"dense_weight": -1})
    with pytest.raises(ConfigError, match="hybrid mode needs"):
        RetrieverConfig.from_mapping({"dense_weight": 0, "bm25_weight": 0})
    with pytest.raises(ConfigError, match="backend"):
        RetrieverConfig.from_mapping({"backend": "tensorflow"})
    cfg = RetrieverConfig.from_mapping({"rrf_k": 10, "mode": "bm25"})
    assert cfg.rrf_k == 10 and cfg.replace(mode="dense").mode == "dense"


def test_lexical_tokenizer_folds_and_stems():
    tok = LexicalTokenizer()
    assert tok("The Pokémon Company's &quot;games&quot; were released") == ["pokemon", "compani", "game", "releas"]
    assert LexicalTokenizer("none", "none")("The Cats 2") == ["the", "cats", "2"]


def test_top_k_is_deterministic():
    import numpy as np

    scores = np.array([0.0, 2.0, 1.0, 2.0, 0.5, 2.0])
    assert top_k(scores, 2) == [1, 3]
    assert top_k(scores, 10) == [1, 3, 5, 2, 4]
    assert top_k(np.zeros(3), 2) == []
