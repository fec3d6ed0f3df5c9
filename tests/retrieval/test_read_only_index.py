"""A read-only index answers queries: Chroma writes to chroma.sqlite3 even to read, so a read-only
store is queried from a private copy; BM25 reads its files as they are. Writing into a read-only
index (a rebuild) is a StorageError that names the folder, not a traceback from SQLite."""

from __future__ import annotations

import json
import textwrap

import pytest
from read_only import chmod_tree, run_python, unprivileged

import program.retrieval.store as store
from data.indexing import build_index
from program.errors import StorageError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.integrity import sha256_file

CFG = RetrieverConfig(embedding_model="fake-hash", backend="torch")
MODES = ("dense", "bm25", "hybrid")
QUERIES = ["Who designed the Eiffel Tower?", "mustard city", "Who first climbed Mount Everest?"]


def hits(retriever) -> list[list[str]]:
    return [[p.id for p in retriever.retrieve(q, 3)] for q in QUERIES]


@pytest.fixture
def index(tmp_path, passages, fake_embedder):
    folder = tmp_path / "idx"
    build_index(passages, folder, CFG, progress=False, embedder=fake_embedder)
    yield folder
    chmod_tree(folder, writable=True)  # so pytest can remove it


CHILD = """
import json
from conftest import HashEmbedder, tiny_passages
from data.indexing import build_index
from program.errors import StorageError
from program.retrieval import RetrieverConfig, open_retriever
cfg = RetrieverConfig(embedding_model="fake-hash", backend="torch")
out = {}
for mode in ("dense", "bm25", "hybrid"):
    r = open_retriever(INDEX, cfg.replace(mode=mode), embedder=HashEmbedder())
    out[mode] = [[p.id for p in r.retrieve(q, 3)] for q in QUERIES]
out["up_to_date"] = build_index(tiny_passages(), INDEX, cfg, progress=False, embedder=HashEmbedder())["status"]
try:
    build_index(tiny_passages(), INDEX, cfg, progress=False, embedder=HashEmbedder(), rebuild=True)
except StorageError as exc:
    out["rebuild_error"] = str(exc)
print(json.dumps(out))
"""


def test_read_only_index_answers_queries(index, fake_embedder):
    want = {mode: hits(open_retriever(index, CFG.replace(mode=mode), embedder=fake_embedder)) for mode in MODES}
    before = {p: sha256_file(p) for p in index.rglob("*") if p.is_file()}
    chmod_tree(index, writable=False)
    prefix = unprivileged(index)
    code = f"INDEX = {str(index)!r}\nQUERIES = {QUERIES!r}\n" + textwrap.dedent(CHILD)
    done = run_python(prefix, code)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert {mode: out[mode] for mode in want} == want  # the same hits as from the writable index
    assert out["up_to_date"] == "complete"  # `sharp index` checks a read-only index without writing
    assert str(index) in out["rebuild_error"] and "writable" in out["rebuild_error"]
    assert "read-only" in done.stderr and "private copy" in done.stderr
    assert {p: sha256_file(p) for p in index.rglob("*") if p.is_file()} == before  # nothing written


def test_engine_refusal_falls_back_to_a_copy(index, fake_embedder, monkeypatch):
    """Where the folder looks writable but SQLite refuses (a read-only mount seen by root), the
    engine's own error sends the query to a private copy too; a build there is a StorageError."""
    want = hits(open_retriever(index, CFG.replace(mode="dense"), embedder=fake_embedder))
    real = store._persistent
    from chromadb.errors import InternalError

    def refuse(path):
        if store.Path(path) == index / "chroma":
            raise InternalError("error returned from database: (code: 8) attempt to write a readonly database")
        return real(path)

    monkeypatch.setattr(store, "_persistent", refuse)
    monkeypatch.setattr(store, "_copies", {})
    assert hits(open_retriever(index, CFG.replace(mode="dense"), embedder=fake_embedder)) == want
    assert list(store._copies) == [(index / "chroma").resolve()]
    with pytest.raises(StorageError, match=r"cannot write the index's Chroma store at .*idx/chroma"):
        store.DenseStore(index).open(create=True)
