"""build_index: manifest, idempotence, resume after an interruption, mismatch and missing errors."""

from __future__ import annotations

import pytest

import data.indexing as indexing
from data.errors import DatasetError
from data.indexing import build_index
from program.errors import IndexMismatchError, IndexMissingError, QuestionError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.dense import dense_document
from program.retrieval.manifest import corpus_sha256, read_manifest
from program.types import Passage

CFG = RetrieverConfig(embedding_model="fake-hash", backend="torch")


class Interrupted(Exception):
    pass


class DyingEmbedder:
    """Wraps an embedder and raises on the n-th encode call, as a kill would stop a build."""

    def __init__(self, inner, die_on_call: int) -> None:
        self.inner, self.die_on_call, self.calls = inner, die_on_call, 0
        self.dimension, self.backend, self.max_seq_length = inner.dimension, "fake", 256

    def encode(self, texts, batch_size=None, progress=None):
        self.calls += 1
        if self.calls == self.die_on_call:
            raise Interrupted()
        return self.inner.encode(texts, batch_size, progress)


def test_build_writes_complete_manifest(tmp_path, passages, fake_embedder):
    m = build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    on_disk = read_manifest(tmp_path / "idx")
    assert on_disk == m
    assert m["status"] == "complete"
    assert m["num_passages"] == 20 and m["counts"] == {"dense": 20, "bm25": 20}
    assert m["corpus_sha256"] == corpus_sha256(passages)
    assert m["embedding_model"] == "fake-hash" and m["dimension"] == 64
    assert {"created_at", "completed_at", "versions", "bm25", "dense_text"} <= set(m)
    assert len(fake_embedder.encoded) == 20


def test_second_build_does_nothing(tmp_path, passages, fake_embedder):
    first = build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    fake_embedder.encoded.clear()
    second = build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    assert fake_embedder.encoded == []
    assert second == first


def test_resume_embeds_only_missing_ids(tmp_path, passages, fake_embedder, monkeypatch):
    monkeypatch.setattr(indexing, "CHUNK", 6)
    with pytest.raises(Interrupted):
        build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=DyingEmbedder(fake_embedder, 3))
    partial = read_manifest(tmp_path / "idx")
    assert partial["status"] == "building" and partial["counts"]["dense"] == 12
    with pytest.raises(IndexMissingError, match="sharp index"):
        open_retriever(tmp_path / "idx", CFG, embedder=fake_embedder)

    from program.retrieval.dense import open_collection, stored_ids

    stored = stored_ids(open_collection(tmp_path / "idx"))
    assert len(stored) == 12
    fake_embedder.encoded.clear()
    m = build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    expected = {dense_document(p, CFG.dense_text) for p in passages if p.id not in stored}
    assert len(fake_embedder.encoded) == 8 and set(fake_embedder.encoded) == expected
    assert m["status"] == "complete" and m["counts"]["dense"] == 20
    assert m["created_at"] == partial["created_at"]


def test_mismatched_resume_is_refused(tmp_path, passages, fake_embedder, monkeypatch):
    monkeypatch.setattr(indexing, "CHUNK", 6)
    with pytest.raises(Interrupted):
        build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=DyingEmbedder(fake_embedder, 2))
    other = passages[:-1] + [Passage("t99", "Other", "Another text entirely.")]
    with pytest.raises(IndexMismatchError, match="resume.*--rebuild"):
        build_index(other, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    with pytest.raises(IndexMismatchError, match="embedding_model"):
        build_index(
            passages,
            tmp_path / "idx",
            CFG.replace(embedding_model="other-model"),
            progress=False,
            embedder=fake_embedder,
        )


def test_open_mismatch_errors(tmp_path, passages, fake_embedder):
    build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    with pytest.raises(IndexMismatchError, match="embedding_model.*fake-hash.*--rebuild"):
        open_retriever(tmp_path / "idx", CFG.replace(embedding_model="sentence-transformers/other"))
    with pytest.raises(IndexMismatchError, match="corpus"):
        open_retriever(tmp_path / "idx", CFG, embedder=fake_embedder, corpus_sha256=corpus_sha256(passages[:5]))
    with pytest.raises(IndexMismatchError, match="bm25"):
        open_retriever(tmp_path / "idx", CFG.replace(bm25_k1=2.0), embedder=fake_embedder)
    # the right corpus opens fine
    open_retriever(tmp_path / "idx", CFG, embedder=fake_embedder, corpus_sha256=corpus_sha256(reversed(passages)))


def test_build_over_other_corpus_needs_rebuild(tmp_path, passages, fake_embedder):
    build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    with pytest.raises(IndexMismatchError, match="--rebuild"):
        build_index(passages[:10], tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    m = build_index(passages[:10], tmp_path / "idx", CFG, progress=False, embedder=fake_embedder, rebuild=True)
    assert m["num_passages"] == 10 and m["counts"]["dense"] == 10


def test_dimension_mismatch_at_query(tmp_path, passages, fake_embedder):
    HashEmbedder = type(fake_embedder)
    build_index(passages, tmp_path / "idx", CFG.replace(mode="dense"), progress=False, embedder=fake_embedder)
    r = open_retriever(tmp_path / "idx", CFG.replace(mode="dense"), embedder=HashEmbedder(dimension=32))
    with pytest.raises(IndexMismatchError, match="32-d.*64-d"):
        r.retrieve("Eiffel", 3)


def test_missing_index_names_the_command(tmp_path):
    with pytest.raises(IndexMissingError, match=r"sharp index --dataset hotpotqa --workspace"):
        open_retriever(tmp_path / "ws" / "indexes" / "hotpotqa", CFG)
    with pytest.raises(IndexMissingError, match=r"sharp index --dataset mine --index-dir"):
        open_retriever(tmp_path / "elsewhere", CFG, dataset="mine")


def test_bad_corpora(tmp_path, fake_embedder):
    with pytest.raises(DatasetError, match="empty"):
        build_index([], tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    dup = [Passage("a", "A", "x"), Passage("a", "B", "y")]
    with pytest.raises(DatasetError, match="twice"):
        build_index(dup, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_queries_per_mode(tmp_path, passages, fake_embedder, mode):
    build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    r = open_retriever(tmp_path / "idx", CFG.replace(mode=mode), embedder=fake_embedder)
    hits = r.retrieve("Who climbed Mount Everest first?", 3)
    assert {"Mount Everest", "Edmund Hillary"} & {p.title for p in hits}
    assert all(isinstance(p, Passage) for p in hits) and len(hits) <= 3
    assert [p.score for p in hits] == sorted((p.score for p in hits), reverse=True)
    with pytest.raises(QuestionError):
        r.retrieve("   ", 3)
    with pytest.raises(QuestionError):
        r.retrieve("Everest", 0)
    long_hits = r.retrieve("Everest mountain " * 600, 3)  # 10,200 characters
    assert long_hits and len(long_hits) <= 3
    many = r.retrieve_many(["Pokemon creator", "Beethoven birthplace"], 2)
    assert len(many) == 2 and all(len(h) <= 2 for h in many)


def _as_built_by_the_old_embedder(index_dir) -> None:
    """Rewrite a manifest as the batched int8 embedder left it: backend onnx-int8, no method."""
    from program.retrieval.manifest import write_manifest

    m = read_manifest(index_dir)
    m.pop("embedding_method")
    m["backend"] = "onnx-int8"
    write_manifest(index_dir, m)


def test_manifest_records_the_embedding_method(tmp_path, passages, fake_embedder):
    m = build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    assert m["embedding_method"] == "custom:fake"  # the embedder that ran, not the config's backend
    assert "embedding_method" not in CFG.index_settings()  # added by build_index from the embedder


def test_index_from_the_old_batched_embedder_is_refused(tmp_path, passages, fake_embedder):
    build_index(passages, tmp_path / "ws" / "indexes" / "hotpotqa", CFG, progress=False, embedder=fake_embedder)
    idx = tmp_path / "ws" / "indexes" / "hotpotqa"
    _as_built_by_the_old_embedder(idx)
    default = CFG.replace(backend="onnx-int8")  # the per-text method now; no model is loaded to refuse
    for mode in ("dense", "hybrid"):
        with pytest.raises(IndexMismatchError, match=r"embedding_method: the index records none.*onnx-int8") as err:
            open_retriever(idx, default.replace(mode=mode))
        assert "sharp index --dataset hotpotqa --workspace" in str(err.value) and "--rebuild" in str(err.value)
    # BM25 alone does not read the vectors: it still opens, and answers
    hits = open_retriever(idx, default.replace(mode="bm25")).retrieve("Who climbed Mount Everest first?", 3)
    assert "Edmund Hillary" in {p.title for p in hits}
    # building over it is refused too (reuse would keep the old vectors), until --rebuild
    with pytest.raises(IndexMismatchError, match="embedding_method.*--rebuild"):
        build_index(passages, idx, CFG, progress=False, embedder=fake_embedder)
    m = build_index(passages, idx, CFG, progress=False, embedder=fake_embedder, rebuild=True)
    assert m["embedding_method"] == "custom:fake"


def test_index_from_another_embedding_method_is_refused(tmp_path, passages, fake_embedder):
    build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    for backend in ("torch", "onnx", "onnx-int8"):
        with pytest.raises(IndexMismatchError, match=r"embedding_method: index has 'custom:fake'.*--rebuild"):
            open_retriever(tmp_path / "idx", CFG.replace(backend=backend))
    with pytest.raises(IndexMismatchError, match="embedding_method"):
        build_index(passages, tmp_path / "idx", CFG, progress=False)  # the config's own embedder (torch)
