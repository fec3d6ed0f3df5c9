"""The evidence ranker: title links, candidate features, fitting, the ranked retriever and its checks."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest
from doubles import ranked_passage as P
from typer.testing import CliRunner

from experiments import rankers
from experiments.cli import app
from optimize.evidence_ranker import fit_ranker, hybrid_order, pool_scores
from program.errors import ConfigError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.links import TitleLinker, surface
from program.retrieval.ranked import (
    FEATURES,
    CandidatePools,
    EvidenceRanker,
    RankedRetriever,
    RankerError,
    candidate_features,
    rank,
)
from program.types import Passage


def test_the_linker_finds_the_longest_titles_a_text_names():
    linker = TitleLinker(
        [("1", "New York"), ("2", "York"), ("3", "Paris (band)"), ("4", "the"), ("5", "Bonn"), ("6", "Ab")]
    )
    text = "He moved from New York to Paris, then to Bonn; Bonn again. York is a city. the end. Ab."
    # longest match at each place (New York, not York inside it); "(band)" dropped; the lower-case "the"
    # and the two-letter "Ab" are not names worth linking; each id once, in order of first mention
    assert linker.mentioned(text) == ["1", "3", "5", "2"]
    assert linker.mentioned(text, exclude="5") == ["1", "3", "2"] and linker.mentioned(text, limit=2) == ["1", "3"]
    assert surface("Paris (band)") == ("Paris",) and len(linker) == 4


def _features(**lists):
    hyb = [P(i) for i in lists.get("hybrid", [])]
    dense = [Passage(i, i.upper(), "", s) for i, s in lists.get("dense", [])]
    bm25 = [Passage(i, i.upper(), "", s) for i, s in lists.get("bm25", [])]
    hop = [P(i) for i in lists.get("hop", [])]
    linked = [[P(i) for i in ls] for ls in lists.get("linked", [])]
    linker = TitleLinker([(i, i.upper()) for i in "abcdexyz"])
    return candidate_features(lists.get("query", "q"), hyb, dense, bm25, hop, linked, linker)


def test_candidate_features_read_the_searches_and_the_links():
    pool = _features(
        query="Which film did B direct?",
        hybrid=["a", "b", "c"],
        dense=[("b", 0.9), ("a", 0.5)],
        bm25=[("a", 12.0), ("c", 6.0)],
        hop=["x", "b"],
        linked=[["x"], [], ["x", "y"]],
    )
    assert list(pool) == ["a", "b", "c", "x", "y"]  # hybrid hits, then the hop's, then linked ones
    a, b, c, x, y = (pool[i][1] for i in "abcxy")
    assert set(a) == set(FEATURES)
    assert (a["q_hybrid"], b["q_hybrid"], x["q_hybrid"]) == (1.0, 0.5, 0.0)
    assert (b["q_dense"], a["dense_score"], c["bm25_score"]) == (1.0, 0.5, 0.5)
    assert (x["hop"], b["hop"], x["hop_top10"]) == (1.0, 0.5, 1.0)
    assert b["title_in_query"] == 1.0 and a["title_in_query"] == 0.0
    # x is named by the 1st and the 3rd hybrid hits, y by the 3rd only
    assert (x["linked"], x["linked_count"], y["linked"], y["linked_count"]) == (1.0, 2.0, pytest.approx(1 / 3), 1.0)


def test_links_top_sees_a_passage_that_names_a_top_hit():
    linker = TitleLinker([("a", "Alpha"), ("b", "Bonn"), ("x", "Xanten")])
    top = [Passage("a", "Alpha", ""), Passage("b", "Bonn", "")]
    named = candidate_features("q", top, [], [], [Passage("x", "Xanten", "It lies near Bonn.")], [], linker)
    assert named["x"][1]["links_top"] == 0.5  # it names the second hit
    unnamed = candidate_features("q", top, [], [], [Passage("x", "Xanten", "It lies near Bo.")], [], linker)
    assert unnamed["x"][1]["links_top"] == 0.0


def _ranker(weights: dict[str, float], **fitted_on) -> EvidenceRanker:
    names = tuple(weights)
    return EvidenceRanker.make(names, [0.0] * len(names), [1.0] * len(names), list(weights.values()), -1.0, fitted_on)


def test_rank_orders_by_probability_and_keeps_the_order_found_on_ties():
    pool = _features(hybrid=["a", "b", "c"], linked=[["x"]])
    ranked = rank(pool, _ranker({"linked": 5.0, "q_hybrid": 1.0}))
    assert [p.id for p in ranked] == ["x", "a", "b", "c"]
    assert 0.0 < ranked[-1].score < ranked[0].score < 1.0  # scores are probabilities
    flat = rank(pool, _ranker({"hop": 1.0}))  # every candidate ties: the order found
    assert [p.id for p in flat] == ["a", "b", "c", "x"]


def _cases(n: int) -> list[dict]:
    """Questions whose gold pair is the first hybrid hit and a linked passage ranked last by the search."""
    out = []
    for i in range(n):
        cands = [{"title": f"G{i}", "features": {f: 0.0 for f in FEATURES} | {"q_hybrid": 1.0}}]
        for j in range(2, 7):
            cands.append({"title": f"N{i}-{j}", "features": {f: 0.0 for f in FEATURES} | {"q_hybrid": 1 / j}})
        cands.append({"title": f"L{i}", "features": {f: 0.0 for f in FEATURES} | {"linked": 1.0}})
        out.append({"id": str(i), "gold": [f"G{i}", f"L{i}"], "candidates": cands})
    return out


def test_a_fitted_ranker_finds_what_the_search_order_misses():
    train, held = _cases(30), _cases(10)
    ranker = fit_ranker(train, fitted_on={"dataset": "toy"})
    assert ranker.fitted_on["questions"] == 30 and ranker.fitted_on["dataset"] == "toy"
    fitted, search = pool_scores(held, ranker.probability), pool_scores(held, hybrid_order)
    assert fitted["all_gold@3"] == 1.0 and search["all_gold@5"] == 0.0 and search["pool_all_gold"] == 1.0
    with pytest.raises(ConfigError, match="cannot fit an? evidence ranker"):
        fit_ranker([{"id": "1", "gold": ["nope"], "candidates": _cases(1)[0]["candidates"]}])


def test_an_edited_or_unknown_ranker_is_refused():
    data = _ranker({"linked": 1.0}).model_dump(mode="json")
    data["weights"][0] = 9.0
    with pytest.raises(ConfigError, match="do not match its digest.*sharp fit-ranker"):
        RetrieverConfig.from_mapping({"ranker": data})
    data = _ranker({"linked": 1.0}).model_dump(mode="json")
    data["features"] = ["shoe_size"]
    with pytest.raises(ConfigError, match="unknown features"):
        EvidenceRanker.from_mapping(data)
    with pytest.raises(ConfigError, match="needs mode=hybrid"):
        RetrieverConfig.from_mapping({"ranker": _ranker({"linked": 1.0}).model_dump(), "mode": "bm25"})


@pytest.fixture
def tiny_index(tmp_path, passages, fake_embedder):
    from data.indexing import build_index
    from program.retrieval.manifest import corpus_sha256

    cfg = RetrieverConfig(embedding_model="fake-hash", backend="torch")
    build_index(passages, tmp_path / "idx", cfg, progress=False, embedder=fake_embedder)
    return tmp_path / "idx", cfg, corpus_sha256(passages)


def test_open_retriever_ranks_the_pool_and_refuses_another_corpus(tiny_index, fake_embedder):
    idx, cfg, corpus = tiny_index
    linker_first = _ranker({"linked": 1.2, "q_hybrid": 2.0}, corpus_sha256=corpus, dataset="tiny")
    ranked = open_retriever(idx, cfg.replace(ranker=linker_first), embedder=fake_embedder)
    assert isinstance(ranked, RankedRetriever)
    q = "Which river city was the German composer of the Moonlight sonata born in?"
    plain = [p.title for p in open_retriever(idx, cfg, embedder=fake_embedder).retrieve(q, 20)]
    got = ranked.retrieve(q, 3)
    # the top hit (Beethoven) names Bonn in its text: the linked passage comes second, whatever its search rank
    assert plain[0] == "Beethoven" and plain.index("Bonn") >= 3
    assert [p.title for p in got[:2]] == ["Beethoven", "Bonn"] and got[0].score >= got[1].score
    other = _ranker({"linked": 1.0}, corpus_sha256="f" * 64, dataset="hotpotqa")
    with pytest.raises(
        RankerError,
        match=r"fitted on dataset 'hotpotqa' \(corpus ffffffffffff\).*dataset 'tiny'.*sharp fit-ranker --dataset tiny",
    ):
        open_retriever(idx, cfg.replace(ranker=other), embedder=fake_embedder, dataset="tiny")


class _Lists:
    """A hybrid retriever double over ``passages``: ranked ids per query; records every search."""

    def __init__(self, passages, ranked):
        self.by_id, self.ranked, self.calls = {p.id: p for p in passages}, ranked, []

    def retrieve_many(self, queries, k):
        self.calls.append(list(queries))
        return [[self.by_id[i] for i in self.ranked.get(q, [])][:k] for q in queries]

    def ranked_lists(self, queries, k):
        return [(hits, [], []) for hits in self.retrieve_many(queries, k)]


def test_pools_search_the_hop_from_the_top_hit_and_link_from_the_top_hits():
    passages = [
        Passage("a", "A", "Names Bonn."),
        Passage("b", "Bonn", ""),
        Passage("x", "X", ""),
        Passage("y", "Y", ""),
    ]
    hybrid = _Lists(passages, {"q": ["a", "y"], "q A. ": ["x"]})
    (pool,) = CandidatePools(hybrid, passages, depth=5, link_from=1, seed_chars=0).pools(["q"])
    assert list(pool) == ["a", "y", "x", "b"]  # hybrid hits, the hop's, then what the top hit names
    assert pool["b"][1]["linked"] == 1.0 and pool["b"][1]["q_hybrid"] == 0.0 and pool["x"][1]["hop"] == 1.0
    assert hybrid.calls == [["q"], ["q A. "]]  # the hop query: the question plus the top passage's title


def test_a_chain_hop_looks_up_the_earlier_answer_s_own_passage_by_title():
    passages = [
        Passage("a", "A", "Names nothing."),
        Passage("m", "Max Mack (director)", "Max Mack was born in Halberstadt."),
        Passage("n", "Max Mack (footballer)", "Max Mack played football."),
        Passage("x", "X", ""),
        Passage("y", "Y", ""),
    ]
    hybrid = _Lists(passages, {"Where was max mack born?": ["a", "x", "y"]})
    pools = CandidatePools(hybrid, passages, depth=5, link_from=1, seed_chars=0)
    assert [p.id for p in pools.titled("MAX MACK")] == ["m", "n"]  # case and the parenthetical aside
    retriever = RankedRetriever(pools, _ranker({"q_hybrid": 2.0, "title_in_query": 1.0}))
    top, titled = retriever.with_titles("Where was max mack born?", 2, ["Max Mack"])
    # the hybrid hits outrank both namesakes here, yet the best-ranked titled passage is read, first
    assert titled == ["m", "n"] and [p.id for p in top] == ["m", "a"]
    assert retriever.with_titles("Where was max mack born?", 2, ["Nobody"]) == (retriever.retrieve(
        "Where was max mack born?", 2), [])  # fmt: skip


def test_ranker_names_resolve_in_the_workspace_then_the_shipped_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(rankers, "SHIPPED_RANKERS", tmp_path / "shipped")
    with pytest.raises(ConfigError, match="no evidence ranker 'hp'.*known: none.*sharp fit-ranker"):
        rankers.load_ranker("hp", tmp_path)
    rankers.save_ranker(_ranker({"linked": 1.0}), tmp_path / "shipped" / "hp.json")
    assert rankers.load_ranker("hp", tmp_path)["features"] == ["linked"]
    rankers.save_ranker(_ranker({"hop": 1.0}), rankers.rankers_dir(tmp_path) / "hp.json")
    assert rankers.resolve({"ranker": "hp", "mode": "hybrid"}, tmp_path)["ranker"]["features"] == ["hop"]
    assert rankers.resolve({"ranker": None}, tmp_path) == {"ranker": None}
    path = rankers.rankers_dir(tmp_path) / "hp.json"
    path.write_text(path.read_text().replace('"hop"', '"linked"'))
    with pytest.raises(ConfigError, match="hp.json.*do not match its digest"):
        rankers.load_ranker("hp", tmp_path)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="hp.json is not a readable ranker file"):
        rankers.load_ranker(str(path), tmp_path)


def test_fit_ranker_command_saves_a_ranker_that_eval_retrieval_uses(tmp_path, tiny_dataset, fake_models, new_store):
    data = tmp_path / "tiny"
    shutil.copytree(tiny_dataset, data)
    rows = json.loads((data / "dev.json").read_text())
    (data / "train.json").write_text(json.dumps(rows * 1))
    ws = tmp_path / "ws"
    runner = CliRunner()
    base = ["--dataset", str(data), "--workspace", str(ws)]
    assert runner.invoke(app, ["index", *base, "--no-progress"]).exit_code == 0
    uri = new_store(tmp_path / "mlflow.db")
    res = runner.invoke(app, ["fit-ranker", *base, "--n-train", "3", "--tracking-uri", uri, "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    import mlflow

    client = mlflow.MlflowClient(uri)
    (run,) = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert run.info.status == "FINISHED" and "held_out.all_gold_at_3" in run.data.metrics  # MLflow refuses "@"
    assert summary["fitted_on"]["n_train"] == 3 and summary["scores"]["held_out"]["questions"] == 1
    saved = json.loads((ws / "rankers" / "tiny.json").read_text())
    assert saved["fitted_on"]["corpus_sha256"] and saved["fitted_on"]["pool"]["depth"] == 20
    again = runner.invoke(app, ["fit-ranker", *base, "--no-tracking"])
    assert again.exit_code != 0 and "exists" in again.output and "--overwrite" in again.output
    res = runner.invoke(
        app, ["eval-retrieval", *base, "--split", "dev", "-k", "3", "--json", "--retriever-set", "ranker=tiny"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["overall"]["n"] == 4
    res = runner.invoke(app, ["eval-retrieval", *base, "--split", "dev", "--retriever-set", "ranker=nope"])
    assert res.exit_code != 0 and "no evidence ranker 'nope'" in res.output and "tiny" in res.output.split("known:")[1]
    # the command the error suggests fits it, and the same retrieval then runs
    suggested = shlex.split(" ".join(res.output.split()).split("Fit one with `")[1].split("`")[0])
    assert suggested[:2] == ["sharp", "fit-ranker"] and "--workspace" in suggested
    assert runner.invoke(app, [*suggested[1:], "--no-tracking"]).exit_code == 0
    res = runner.invoke(app, ["eval-retrieval", *base, "--split", "dev", "--json", "--retriever-set", "ranker=nope"])
    assert res.exit_code == 0, res.output


def test_fit_selector_command_saves_config_keys_that_a_program_reads_and_refuses_to_overwrite(
    tmp_path, tiny_dataset, fake_models
):
    data = tmp_path / "tiny"
    shutil.copytree(tiny_dataset, data)
    rows = json.loads((data / "dev.json").read_text())
    (data / "train.json").write_text(json.dumps(rows * 2))
    ws = tmp_path / "ws"
    runner = CliRunner()
    base = ["--dataset", str(data), "--workspace", str(ws)]
    assert runner.invoke(app, ["index", *base, "--no-progress"]).exit_code == 0
    res = runner.invoke(app, ["fit-selector", *base, "--n-train", "4", "--n-heldout", "2", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["fit"]["questions"] == 4 and summary["held_out"] == "train 4:6"
    assert "top 3 passages whole (the draft today)" in summary["coverage"]
    saved = json.loads((ws / "selectors" / "tiny.json").read_text())
    assert saved["evidence"] == "sentences" and saved["selector"]["fitted_on"]["corpus_sha256"]
    from program.sharp.policy import SharpConfig

    config = SharpConfig.from_mapping(saved)  # the keys a program takes with --config
    assert config.selector is not None and config.sentence_passages == 5
    again = runner.invoke(app, ["fit-selector", *base, "--n-train", "4"])
    assert again.exit_code != 0 and "--overwrite" in again.output
