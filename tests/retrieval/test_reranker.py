"""The trained reranker: its manifest (checksums, corpus), loading by name, and the reranking retriever."""

from __future__ import annotations

import json
import shutil

import pytest
from doubles import CORPUS, KeywordRetriever

from optimize.reranker_training import mine_pairs
from program.retrieval.factory import reranker_folder
from program.retrieval.reranker import (
    MANIFEST,
    CrossEncoderReranker,
    RerankerError,
    RerankingRetriever,
    read_reranker_manifest,
    write_reranker_manifest,
)
from program.types import Passage

pytest.importorskip("transformers")


@pytest.fixture
def trained(tmp_path, request):
    """A copy of a tiny random cross-encoder, with a reranker manifest as `sharp train-reranker` writes it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path / "rerankers" / "toy"
    folder.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz0123456789"]
    (folder / "vocab.txt").write_text("\n".join(vocab))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
        max_position_embeddings=128,
        initializer_range=0.5,
    )
    BertForSequenceClassification(cfg).save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    write_reranker_manifest(
        folder, {"name": "toy", "dataset": "toy", "corpus_sha256": "c" * 64, "training": {"max_length": 64}}
    )
    return folder


def test_a_trained_reranker_loads_by_name_and_scores_in_0_1(trained):
    assert reranker_folder("toy", trained.parent) == trained
    scorer = CrossEncoderReranker(trained, corpus_sha256="c" * 64, dataset="toy")
    scores = scorer("who directed pulp fiction", CORPUS[:3])
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores) and len(set(scores)) == 3
    assert scorer.max_length == 64  # from the manifest's training settings


def test_an_unknown_name_says_how_to_train_one(tmp_path):
    with pytest.raises(RerankerError, match="sharp train-reranker --dataset DATASET --name nope"):
        reranker_folder("nope", tmp_path)


def test_a_tampered_file_is_refused_naming_it(trained):
    weights = next(p for p in trained.iterdir() if p.suffix in (".safetensors", ".bin"))
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(RerankerError, match=f"{weights.name} changed since training.*sharp train-reranker"):
        read_reranker_manifest(trained)


def test_a_missing_file_or_manifest_is_refused(trained, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(trained, copy)
    (copy / "vocab.txt").unlink()
    with pytest.raises(RerankerError, match="vocab.txt is missing"):
        read_reranker_manifest(copy)
    (copy / MANIFEST).unlink()
    with pytest.raises(RerankerError, match="not a reranker trained here"):
        read_reranker_manifest(copy)
    (copy / MANIFEST).write_text("{not json")
    with pytest.raises(RerankerError, match="damaged"):
        read_reranker_manifest(copy)


def test_a_reranker_of_another_corpus_is_refused(trained):
    with pytest.raises(RerankerError, match="trained on another corpus.*sharp train-reranker --dataset 2wiki"):
        CrossEncoderReranker(trained, corpus_sha256="d" * 64, dataset="2wiki")


class FixedScores:
    def __init__(self, by_id):
        self.by_id, self.pairs = by_id, []

    def score_pairs(self, pairs):
        self.pairs += pairs
        return [self.by_id.get(p.id, 0.0) for _, p in pairs]


def test_the_reranking_retriever_reorders_each_querys_top_depth_and_cuts_at_k():
    scorer = FixedScores({"p4": 0.9, "p2": 0.8})
    r = RerankingRetriever(KeywordRetriever(), scorer, depth=6)
    hits = r.retrieve_many(["Palme d'Or 1994 film director", "Paris"], 2)
    assert [p.id for p in hits[0]] == ["p4", "p2"] and hits[0][0].score == 0.9
    assert len(scorer.pairs) == 12  # depth 6 for each of the two queries, scored in one batch
    assert {q for q, _ in scorer.pairs} == {"Palme d'Or 1994 film director", "Paris"}


def test_mining_takes_gold_as_positives_and_the_top_non_gold_hits_as_negatives():
    import dspy

    ex = dspy.Example(id="q", question="Palme d'Or 1994 film director", gold_titles=["Pulp Fiction", "Missing Page"])
    by_title = {p.title: p for p in CORPUS}
    pairs = mine_pairs([ex], KeywordRetriever().retrieve_many, by_title, negatives=2, depth=5)
    pos = [p for p in pairs if p.label == 1.0]
    neg = [p for p in pairs if p.label == 0.0]
    assert [p.text.split(":")[0] for p in pos] == ["Pulp Fiction"]  # a gold title not in the corpus is skipped
    assert len(neg) == 2 and all(not n.text.startswith("Pulp Fiction") for n in neg)
    assert json.dumps([p.__dict__ for p in pairs])  # plain data
    no_gold = dspy.Example(id="z", question="x", gold_titles=["Nowhere"])
    assert mine_pairs([no_gold], KeywordRetriever().retrieve_many, by_title, 2, 5) == []


def test_passage_text_pairs_use_title_and_text():
    from program.retrieval.reranker import pair_text

    assert pair_text(Passage("i", "T", "body")) == "T: body"
