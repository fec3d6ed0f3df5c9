"""The evidence pool: passages of every search, ranked by each passage's best score; what a retrieval repair
re-reads from it."""

from __future__ import annotations

from doubles import CORPUS, FieldLM, KeywordRetriever, assign

from program.reading.evidence import EvidencePool
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig
from program.types import Passage

BRIDGE = "What nationality is the director of the film that won the Palme d'Or in 1994?"
CHOICE = "Which director is Polish, Quentin Tarantino or Krzysztof Kieslowski?"


def test_the_pool_is_ranked_by_each_passages_best_score_across_queries():
    pool = EvidencePool()
    a, b, c, d = (Passage(i, i.upper(), "t") for i in "abcd")
    pool.add("q1", [a.with_score(0.9), b.with_score(0.2), c.with_score(0.1)])
    pool.add("q2", [d.with_score(0.8), b.with_score(0.85)])
    assert [p.id for p in pool.select(3, "score")] == ["a", "b", "d"]
    assert [p.id for p in pool.select(3, "round_robin")] == ["a", "d", "b"]
    assert pool.ids() == {"a", "b", "c", "d"}


def reads(*answers):
    """A generator giving ``answers`` in turn (each with its answer tokens' log-probability)."""
    todo = iter(answers)

    def rule(fields):
        answer, lp = next(todo)
        return {"answer": answer, "supporting_passages": [1], "_logprobs": {"answer": [lp]}}

    return FieldLM("generator", rule)


def program(generator, config, retriever, planner=None):
    prog = SharpRAG(retriever, config)
    assign(
        prog,
        {
            "planner": planner or FieldLM("planner", lambda f: {"sub_questions": []}),
            "critic": FieldLM("critic", lambda f: {}),
            "generator": generator,
            "composer": FieldLM(
                "composer", lambda f: {"answer": "Krzysztof Kieslowski", "_logprobs": {"answer": [-2.0]}}
            ),
        },
    )
    return prog


def test_a_retrieval_repair_rereads_the_pools_best_passages_so_a_new_one_displaces_a_weak_draft_passage():
    class Scored(KeywordRetriever):  # the bridge entity's page scores highest for the search that names it
        def retrieve(self, query, k):
            hits = super().retrieve(query, k)
            return [p.with_score(1.0 if "Tarantino" in query and p.id == "p2" else 0.1) for p in hits]

    generator = reads(("Quentin Tarantino", -1.0), ("American", -0.05))
    prog = program(
        generator, SharpConfig(ask_critic="off", evidence_cap=3, repair_bridge=("retrieve",)), Scored(CORPUS)
    )
    pred = prog(question=BRIDGE)
    assert pred.answer == "American" and pred.passages[0].id == "p2" and len(pred.passages) == 3
    second = [s for s in pred.trace if s["role"] == "generator"][1]
    assert second["evidence_ids"] == [p.id for p in pred.passages]


def test_a_comparison_leaves_the_pool_a_retrieval_repair_reads_as_it_was():
    """A retrieval repair reads the same passages whether a comparison's reads ran before it or not, so one
    recording replays every repair order (optimize/replay.py)."""
    sub_values = {
        "What nationality is Quentin Tarantino?": "American",
        "What nationality is Krzysztof Kieslowski?": "Polish",
    }

    def generator(fields):
        value = sub_values.get(fields["question"], "Quentin Tarantino")
        return {"answer": value, "supporting_passages": [1], "_logprobs": {"answer": [-1.0]}}

    planner = FieldLM("planner", lambda f: {"entities": [], "sub_questions": list(sub_values)})
    evidence = {}
    for order in (("compare", "retrieve"), ("retrieve",)):
        config = SharpConfig(ask_critic="off", repair_comparison=order, accept_threshold=0.99)
        prog = program(FieldLM("generator", generator), config, KeywordRetriever(CORPUS), planner)
        pred = prog(question=CHOICE)
        reread = [s for s in pred.trace if s["role"] == "generator"][-1]
        retrieval = [s for s in pred.trace if s["role"] == "retriever"][-1]
        evidence[order] = (reread["evidence_ids"], retrieval["new_ids"])
    assert evidence[("compare", "retrieve")] == evidence[("retrieve",)]
