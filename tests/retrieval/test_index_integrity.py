"""A damaged index is reported, never called up to date: the manifest records every file's size and
sha256; opening checks sizes, `sharp index` and `sharp index --verify` check checksums; each error
names the file and a repair command, and that command is run here to show it repairs the index.

The index here holds PERSISTED passages, so that Chroma has persisted its HNSW files (a smaller
store's HNSW files are scratch, rewritten on every open: tests/retrieval/test_index_after_use.py)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import suggested
from typer.testing import CliRunner

import data.indexing as indexing
from data.indexing import build_index, verify_index
from experiments.cli import app
from program.errors import IndexCorruptError, IndexMissingError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.integrity import sha256_file
from program.retrieval.manifest import read_manifest

CFG = RetrieverConfig(embedding_model="fake-hash", backend="torch")
runner = CliRunner()


def truncate(path, keep: float = 0.5) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(int(size * keep))


def flip_byte(path) -> None:
    """Same size, other content: only a checksum sees it."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def hnsw_file(index_dir):
    return next(index_dir.glob("chroma/*/data_level0.bin"))


DAMAGE = {
    "passages.jsonl": (lambda d: truncate(d / "bm25" / "passages.jsonl"), "bm25/passages.jsonl", "bm25"),
    "npy": (lambda d: truncate(d / "bm25" / "data.csc.index.npy"), "bm25/data.csc.index.npy", "bm25"),
    "vocab": (lambda d: (d / "bm25" / "vocab.index.json").unlink(), "bm25/vocab.index.json", "bm25"),
    "sqlite": (lambda d: truncate(d / "chroma" / "chroma.sqlite3"), "chroma/chroma.sqlite3", "dense"),
    "hnsw": (lambda d: truncate(hnsw_file(d)), "data_level0.bin", "dense"),
}


@pytest.fixture
def corpus(persisted_passages):
    return persisted_passages


@pytest.fixture
def index(tmp_path, corpus, fake_embedder):
    folder = tmp_path / "indexes" / "idx"
    build_index(corpus, folder, CFG, progress=False, embedder=fake_embedder)
    assert list(folder.glob("chroma/*/index_metadata.pickle")), "Chroma did not persist its HNSW segment"
    fake_embedder.encoded.clear()
    return folder


class Interrupted(Exception):
    pass


class DyingEmbedder:
    """Raises on the n-th encode call, as a kill would stop a build."""

    def __init__(self, inner, die_on_call: int) -> None:
        self.inner, self.die_on_call, self.calls = inner, die_on_call, 0
        self.dimension, self.backend, self.max_seq_length = inner.dimension, "fake", 256

    def encode(self, texts, batch_size=None, progress=None):
        self.calls += 1
        if self.calls == self.die_on_call:
            raise Interrupted()
        return self.inner.encode(texts, batch_size, progress)


def test_manifest_records_every_file(index):
    manifest = read_manifest(index)
    files = manifest["files"]
    assert manifest["format"] == 3 and manifest["dense_store"] == {"kind": "embedded"}
    assert {"bm25/passages.jsonl", "bm25/data.csc.index.npy", "chroma/chroma.sqlite3"} <= set(files)
    assert any(rel.endswith("data_level0.bin") and "sha256" in want for rel, want in files.items())
    assert any(rel.endswith("index_metadata.pickle") and "sha256" in want for rel, want in files.items())
    assert files["chroma/chroma.sqlite3"]["kind"] == "sqlite"  # Chroma rewrites it on every open
    bm25 = files["bm25/passages.jsonl"]
    assert bm25["size"] == (index / "bm25" / "passages.jsonl").stat().st_size
    assert bm25["sha256"] == sha256_file(index / "bm25" / "passages.jsonl")


def test_files_stay_valid_after_queries(index, fake_embedder):
    """Opening and querying (which writes chroma.sqlite3) does not make a sound index look damaged."""
    for mode in ("dense", "hybrid"):
        assert open_retriever(index, CFG.replace(mode=mode), embedder=fake_embedder).retrieve("Eiffel", 3)
    assert verify_index(index, CFG)["status"] == "complete"


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damage_is_named_on_open_and_never_up_to_date(index, corpus, fake_embedder, kind):
    damage, name, part = DAMAGE[kind]
    damage(index)
    mode = "bm25" if part == "bm25" else "dense"
    with pytest.raises(IndexCorruptError, match="damaged") as err:
        open_retriever(index, CFG.replace(mode=mode), embedder=fake_embedder)
    assert name in str(err.value) and "sharp index --dataset" in str(err.value)
    assert ("--rebuild" in str(err.value)) == (part == "dense")
    with pytest.raises(IndexCorruptError, match=name):
        verify_index(index, CFG)
    if part == "bm25":  # `sharp index` rebuilds the BM25 part (seconds) and says so
        fake_embedder.encoded.clear()
        manifest = build_index(corpus, index, CFG, progress=False, embedder=fake_embedder)
        assert "repaired_at" in manifest and fake_embedder.encoded == []
        assert verify_index(index, CFG)["files"] == manifest["files"]
        hits = open_retriever(index, CFG.replace(mode="bm25")).retrieve("mustard city", 2)
        assert hits[0].title == "Dijon"
    else:  # damaged vectors need --rebuild: the build refuses and says which command
        with pytest.raises(IndexCorruptError, match=f"{name}.*--rebuild"):
            build_index(corpus, index, CFG, progress=False, embedder=fake_embedder)
        build_index(corpus, index, CFG, progress=False, embedder=fake_embedder, rebuild=True)
        hits = open_retriever(index, CFG.replace(mode="dense"), embedder=fake_embedder).retrieve("Eiffel Tower", 3)
        assert "Eiffel Tower" in [p.title for p in hits]
        assert verify_index(index, CFG)["status"] == "complete"


def test_same_size_damage_is_found_by_checksum(index, corpus, fake_embedder):
    flip_byte(hnsw_file(index))
    open_retriever(index, CFG.replace(mode="dense"), embedder=fake_embedder)  # sizes only: opens
    with pytest.raises(IndexCorruptError, match="sha256 differs"):
        verify_index(index, CFG)
    with pytest.raises(IndexCorruptError, match="sha256 differs.*--rebuild"):  # never "up to date"
        build_index(corpus, index, CFG, progress=False, embedder=fake_embedder)


def test_truncated_manifest(index, corpus, fake_embedder):
    truncate(index / "manifest.json")
    with pytest.raises(IndexCorruptError, match=r"manifest.json is damaged.*--rebuild"):
        open_retriever(index, CFG, embedder=fake_embedder)
    with pytest.raises(IndexCorruptError, match=r"manifest.json is damaged.*--rebuild"):
        build_index(corpus, index, CFG, progress=False, embedder=fake_embedder)
    manifest = build_index(corpus, index, CFG, progress=False, embedder=fake_embedder, rebuild=True)
    assert manifest["status"] == "complete" and verify_index(index, CFG)


def test_killed_build_stays_resumable(tmp_path, passages, fake_embedder, monkeypatch):
    """A half-written index is 'incomplete' (resume), not 'damaged' (rebuild)."""
    monkeypatch.setattr(indexing, "CHUNK", 6)
    with pytest.raises(Interrupted):
        build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=DyingEmbedder(fake_embedder, 3))
    assert "files" not in read_manifest(tmp_path / "idx")
    with pytest.raises(IndexMissingError, match="incomplete.*Resume"):
        open_retriever(tmp_path / "idx", CFG, embedder=fake_embedder)
    fake_embedder.encoded.clear()
    manifest = build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    assert len(fake_embedder.encoded) == 8 and manifest["files"]
    assert verify_index(tmp_path / "idx", CFG)


def test_legacy_index_without_file_records_still_opens(index, fake_embedder):
    manifest = read_manifest(index)
    for key in ("files", "dense_store"):
        manifest.pop(key)
    manifest["format"] = 1
    (index / "manifest.json").write_text(json.dumps(manifest))
    assert open_retriever(index, CFG, embedder=fake_embedder).retrieve("Eiffel", 2)
    assert verify_index(index, CFG)["format"] == 1
    truncate(index / "bm25" / "passages.jsonl")  # no record to compare: found when it fails to load
    with pytest.raises(IndexCorruptError, match="bm25/ does not load"):
        open_retriever(index, CFG.replace(mode="bm25"))


# ---- through the CLI: the suggested command repairs the index ----------------------------------------
def _cli(*args: str):
    return runner.invoke(app, [*args, "--no-progress"] if args[0] == "index" else list(args))


@pytest.mark.parametrize("kind", ["passages.jsonl", "npy", "sqlite", "hnsw"])
def test_cli_damage_error_command_repairs(large_dataset, tmp_path, fake_models, kind):
    ws = tmp_path / "ws"
    base = ["--dataset", str(large_dataset), "--workspace", str(ws)]
    assert _cli("index", *base).exit_code == 0
    index = ws / "indexes" / "large"
    damage, name, part = DAMAGE[kind]
    damage(index)
    mode = "bm25" if part == "bm25" else "hybrid"
    res = _cli("retrieve", "mustard city", *base, "--mode", mode, "--json")
    assert res.exit_code == 2 and name in res.output and "Traceback" not in res.output
    res = _cli("index", *base)  # never "up to date" on a damaged index
    if part == "bm25":
        assert res.exit_code == 0 and "index ready" in res.output
    else:
        assert res.exit_code == 2 and name in res.output and "index ready" not in res.output
    res = _cli("index", *base, "--verify")
    if part == "dense":
        assert res.exit_code == 2 and name in res.output
        repair = suggested(res.output)
        assert repair[0] == "index" and "--rebuild" in repair
        assert _cli(*repair).exit_code == 0
        res = _cli("index", *base, "--verify")
    assert res.exit_code == 0 and "index verified" in res.output
    out = json.loads(_cli("retrieve", "mustard city", *base, "--mode", mode, "--json").stdout)
    assert out["passages"][0]["title"] == "Dijon"


def test_cli_verify_json_and_missing(tiny_dataset, tmp_path, fake_models):
    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path)]
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 2 and "no retrieval index" in res.output
    assert _cli(*suggested(res.output)).exit_code == 0  # "Build it with: ..."
    res = runner.invoke(app, ["index", *base, "--verify", "--json"])
    out = json.loads(res.stdout)
    assert out["verified"] is True and out["num_passages"] == 20 and out["files"]
