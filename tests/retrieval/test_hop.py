"""The no-LM second hop: which passages it keeps, which searches it makes, and its wiring."""

from __future__ import annotations

import pytest
from doubles import RankedRetriever
from doubles import ranked_passage as P

from program.errors import ConfigError, QuestionError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.base import MAX_QUERY_CHARS
from program.retrieval.hop import HopRetriever, hop_query, kept_count
from program.types import Passage


def test_keeps_the_querys_top_hits_then_the_hops_new_passages():
    base = RankedRetriever({"q": ["a", "b", "c", "d", "e", "f"], "q A. ": ["a", "c", "x", "y", "b", "z"]})
    got = HopRetriever(base, keep=0.6).retrieve("q", 5)
    # round(5 * 0.6) = 3 of the question's own hits, then the hop's best passages not already kept
    assert [p.id for p in got] == ["a", "b", "c", "x", "y"]
    first, hop = base.calls
    assert first == (["q"], 20) and hop == ([hop_query("q", P("a"), 300)], 20)


def test_the_hop_query_is_the_query_plus_the_seeds_title_and_text_start():
    seed = Passage("p", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino.")
    assert hop_query("Who directed it?", seed, 20) == "Who directed it? Pulp Fiction. Pulp Fiction is a 19"


def test_fills_from_the_querys_next_hits_when_the_hop_finds_nothing_new():
    base = RankedRetriever({"q": ["a", "b", "c", "d", "e"], "q A. ": ["a", "b"]})
    assert [p.id for p in HopRetriever(base).retrieve("q", 5)] == ["a", "b", "c", "d", "e"]


def test_a_small_corpus_gives_fewer_passages_never_duplicates():
    base = RankedRetriever({"q": ["a", "b"], "q A. ": ["b", "a", "c"]})
    got = [p.id for p in HopRetriever(base).retrieve("q", 5)]
    assert got == ["a", "b", "c"]


def test_no_hop_search_when_k_leaves_no_slot_for_it():
    base = RankedRetriever({"q": ["a", "b"]})
    assert [p.id for p in HopRetriever(base, keep=0.6).retrieve("q", 1)] == ["a"]
    assert len(base.calls) == 1  # round(1 * 0.6) = 1 = k: the hop would add nothing


@pytest.mark.parametrize(
    ("k", "keep", "kept"), [(5, 0.6, 3), (7, 0.6, 4), (3, 0.6, 2), (1, 0.6, 1), (5, 1.0, 5), (5, 0.01, 1)]
)
def test_kept_count(k, keep, kept):
    assert kept_count(k, keep) == kept


def test_many_queries_batch_their_hops_in_one_search_and_stay_aligned():
    base = RankedRetriever({"q1": ["a", "b", "c"], "q2": ["m", "n", "o"], "q1 A. ": ["x"], "q2 M. ": ["y"]})
    got = HopRetriever(base, keep=0.5, seeds=1).retrieve_many(["q1", "q2"], 2)
    assert [[p.id for p in ps] for ps in got] == [["a", "x"], ["m", "y"]]
    assert len(base.calls) == 2 and len(base.calls[1][0]) == 2


def test_two_seeds_fuse_their_hops():
    base = RankedRetriever({"q": ["a", "b", "c", "d"], "q A. ": ["x", "y"], "q B. ": ["y", "z"]})
    got = HopRetriever(base, keep=0.4, seeds=2).retrieve("q", 5)
    assert [p.id for p in got][:2] == ["a", "b"] and got[2].id == "y"  # y is in both hops: first by RRF
    assert {p.id for p in got[3:]} == {"x", "z"}


def test_an_empty_query_is_rejected_and_a_long_one_is_cut():
    base = RankedRetriever({"q": ["a", "b", "c"]})
    with pytest.raises(QuestionError):
        HopRetriever(base).retrieve("   ", 3)
    with pytest.raises(QuestionError):
        HopRetriever(base).retrieve("q", 0)
    HopRetriever(base).retrieve("q" + "x" * 10_000, 3)
    (question_search, _), (hop_search, _) = base.calls[-2:]
    assert len(question_search[0]) == MAX_QUERY_CHARS  # the question's search got the query cut
    # the hop query is cut in its question part, so the seed passage it searches with survives
    assert len(hop_search[0]) == MAX_QUERY_CHARS and hop_search[0].endswith(" A. " + P("a").text[:300])


def test_config_validates_the_hop_settings():
    assert RetrieverConfig().second_hop is False
    with pytest.raises(ConfigError, match="hop_keep"):
        RetrieverConfig.from_mapping({"second_hop": True, "hop_keep": 0})
    with pytest.raises(ConfigError, match="hop_seeds"):
        RetrieverConfig.from_mapping({"hop_seeds": 0})
    # query-time only: the index settings (compared with the manifest) do not change
    assert RetrieverConfig(second_hop=True).index_settings() == RetrieverConfig().index_settings()


def test_open_retriever_wraps_the_index_in_a_hop(tmp_path, passages, fake_embedder):
    from data.indexing import build_index

    cfg = RetrieverConfig(embedding_model="fake-hash", backend="torch")
    build_index(passages, tmp_path / "idx", cfg, progress=False, embedder=fake_embedder)
    plain = open_retriever(tmp_path / "idx", cfg, embedder=fake_embedder)
    hop = open_retriever(tmp_path / "idx", cfg.replace(second_hop=True), embedder=fake_embedder)
    assert isinstance(hop, HopRetriever) and not isinstance(plain, HopRetriever)
    q = "Which river city was the German composer of the Moonlight sonata born in?"
    # the question finds Beethoven but not his birthplace; the hop from Beethoven's passage ("born in Bonn") does
    plain_titles, hop_titles = ([p.title for p in r.retrieve(q, 3)] for r in (plain, hop))
    assert plain_titles[:2] == hop_titles[:2] and plain_titles[0] == "Beethoven"
    assert "Bonn" not in plain_titles and hop_titles[2] == "Bonn"


def test_eval_retrieval_asks_a_hop_retriever_once_per_cutoff():
    import dspy

    from experiments.jobs.evaluation import evaluate_retriever

    ranked = {"q": ["a", "b", "c", "d", "e", "f"], "q A. ": ["x", "a"]}
    questions = [dspy.Example(question="q", gold_titles=["A", "X"], type="bridge")]
    plain = RankedRetriever(ranked)
    metrics, _ = evaluate_retriever(plain, questions, 5)
    assert metrics["overall"]["all_gold@5"] == 0.0 and len(plain.calls) == 1  # prefixes of one top-5
    base = RankedRetriever(ranked)
    metrics, _ = evaluate_retriever(HopRetriever(base), questions, 5)
    # top-2 is [a, x] (1 kept, 1 hop), not the prefix [a, b] of the top-5 [a, b, c, x, d]
    assert metrics["overall"]["all_gold@2"] == 1.0 and metrics["overall"]["all_gold@5"] == 1.0
    assert metrics["by_type"]["bridge"]["all_gold@2"] == 1.0 and metrics["overall"]["n"] == 1
    assert [k for _, k in base.calls] == [20, 20, 20, 20]  # question + hop search, at each of the two cutoffs
    plain.calls.clear()
    metrics, _ = evaluate_retriever(plain, questions, 5, ks=(3, 7))
    assert set(metrics["overall"]) == {"n", *(f"{m}@{k}" for m in ("recall", "precision", "all_gold") for k in (3, 7))}
    assert [k for _, k in plain.calls] == [7]  # one ask at the largest cutoff, scored by prefix
