"""Reranking: the threshold drops weak passages (tiny local cross-encoder), a missing model is a
clear error, and the LM reranker scores pointwise with garbage kept as unscored."""

from __future__ import annotations

import pytest
from doubles import KeywordRetriever, ScriptedLM, assign

from program.errors import ConfigError
from program.systems.rerank import (
    CrossEncoderScorer,
    LMRerankConfig,
    LMRerankRAG,
    RerankConfig,
    RerankerUnavailableError,
    RerankRAG,
    select,
)
from program.types import Passage

Q = "Which film won the Palme d'Or in 1994?"
P = [Passage(f"x{i}", f"T{i}", f"text {i}") for i in range(5)]


def gen(answer="Pulp Fiction"):
    return ScriptedLM("generator", [{"answer": answer, "supporting_passages": [1]}])


def test_select_threshold_order_min_keep_and_unscored():
    kept, dropped = select(P, [0.1, 0.9, 0.5, None, 0.05], k=3, threshold=0.15, min_keep=1)
    assert [p.id for p in kept] == ["x1", "x2", "x3"] and [p.id for p in dropped] == ["x0", "x4"]
    assert kept[0].score == 0.9
    kept, _ = select(P, [0.1, 0.05, 0.0, 0.01, 0.02], k=3, threshold=0.15, min_keep=2)
    assert [p.id for p in kept] == ["x0", "x1"]
    kept, _ = select(P, [0.1] * 5, k=3, threshold=0.15, min_keep=0)
    assert kept == []


def test_cross_encoder_threshold_drops_weak_passages(tiny_cross_encoder):
    retriever = KeywordRetriever()
    scores = CrossEncoderScorer(tiny_cross_encoder)(Q, retriever.retrieve(Q, 7))
    assert len(set(round(s, 4) for s in scores)) > 1 and all(0.0 <= s <= 1.0 for s in scores)
    threshold = sorted(scores)[3]  # the 4 best (ties aside) pass
    cfg = RerankConfig(reranker_model=tiny_cross_encoder, candidate_k=7, k=7, threshold=threshold, min_keep=0)
    prog = RerankRAG(retriever, cfg)
    assign(prog, {"generator": gen()})
    pred = prog(question=Q)
    step = next(s for s in pred.trace if s["role"] == "reranker")
    assert set(step["kept_ids"]) == {pid for pid, s in step["scores"].items() if s >= threshold}
    assert step["dropped_ids"] and all(step["scores"][pid] < threshold for pid in step["dropped_ids"])
    assert [p.id for p in pred.passages] == step["kept_ids"]
    assert [p.score for p in pred.passages] == sorted((p.score for p in pred.passages), reverse=True)
    assert pred.system == "vanilla-rerank" and pred.answer == "Pulp Fiction"


def test_default_threshold_is_015():
    assert RerankConfig().threshold == 0.15 and RerankConfig().reranker_model == "BAAI/bge-reranker-v2-m3"


def test_missing_reranker_model_is_a_clear_error(tmp_path):
    with pytest.raises(RerankerUnavailableError, match="vanilla-lmrerank") as info:
        RerankRAG(KeywordRetriever(), RerankConfig(reranker_model=str(tmp_path / "no-such-model")))
    assert "reranker_model=" in str(info.value)
    with pytest.raises(RerankerUnavailableError, match="bge-reranker-v2-m3"):
        RerankRAG(KeywordRetriever(), RerankConfig())  # offline: nothing can be downloaded


def test_lm_reranker_scores_pointwise_and_keeps_garbage_as_unscored():
    retriever = KeywordRetriever()
    prog = LMRerankRAG(retriever, LMRerankConfig(candidate_k=4, k=3))
    scores = [{"score": 0.05}, {"score": 0.95}, {"score": 40}, {"nonsense": "@@@"}]  # 40 = a percentage
    scorer = ScriptedLM("critic", scores)
    assign(prog, {"scorer": scorer, "generator": gen()})
    pred = prog(question=Q)
    candidates = retriever.retrieve(Q, 4)
    graded = [s for s in pred.trace if s["role"] == "lm_reranker"]
    assert [s["score"] for s in graded] == [0.05, 0.95, 0.4, None] and graded[3]["problem"] == "unparseable"
    assert [p.id for p in pred.passages] == [candidates[1].id, candidates[2].id, candidates[3].id]
    assert pred.system == "vanilla-lmrerank"


def test_lm_reranker_predictor_maps_to_the_critic_role():
    assert LMRerankRAG.ROLE_MAP == {"scorer": "critic"}


def test_rerank_config_validation():
    with pytest.raises(ConfigError, match="candidate_k"):
        RerankConfig.from_mapping({"candidate_k": 3, "k": 5})
    with pytest.raises(ConfigError, match="threshold"):
        RerankConfig.from_mapping({"threshold": 2})
