"""A full disk during `sharp index` is a one-line error naming the path (exit 2), never a traceback
and never an index that looks whole; once space is freed the same command completes and verifies.

Chroma reports a full disk in several ways: SQLite's "database or disk is full", or, from its Rust
compaction, only "Failed to apply logs to the metadata segment" (the cause dropped); a disk that
fills while Chroma rewrites a segment's id map leaves that map cut short, and the store unreadable.
The last tests fill a real (tmpfs) disk; they need `mount` (root) and are skipped without it.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess

import pytest
from child_cli import sharp
from chromadb.errors import InternalError
from typer.testing import CliRunner

import data.indexing as indexing
import program.retrieval.store as store
from data.indexing import build_index, verify_index
from experiments.cli import app
from program.errors import DiskFullError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.manifest import read_manifest

CFG = RetrieverConfig(embedding_model="fake-hash", backend="torch")
SQLITE_FULL = "error returned from database: (code: 13) database or disk is full"
COMPACTION = "Error in compaction: Failed to apply logs to the metadata segment"
runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, [*args, "--no-progress"] if args[0] == "index" and "--verify" not in args else list(args))


def _failing_add(monkeypatch, message: str, after: int = 1) -> None:
    """Chroma's add raises its own InternalError from the ``after``+1-th chunk on, as on a full disk."""
    calls = []
    real = indexing.add_passages

    def add(collection, chunk, vectors):
        calls.append(len(chunk))
        if len(calls) > after:
            raise InternalError(message)
        real(collection, chunk, vectors)

    monkeypatch.setattr(indexing, "add_passages", add)


def test_full_disk_is_one_line_error_then_resumes(tiny_dataset, tmp_path, fake_models, monkeypatch):
    monkeypatch.setattr(indexing, "CHUNK", 6)
    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path)]
    index = tmp_path / "indexes" / "tiny"
    with monkeypatch.context() as m:
        _failing_add(m, SQLITE_FULL)
        res = _cli("index", *base)
    assert res.exit_code == 2 and "Traceback" not in res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"error: the disk is full: cannot write {index} (") and "free there" in line
    assert line.endswith(f"then resume with: sharp index --dataset {tiny_dataset} --workspace {tmp_path}")
    assert read_manifest(index)["status"] == "building"  # nothing looks whole
    res = _cli("retrieve", "mustard city", *base)
    assert res.exit_code == 2 and "incomplete" in res.output
    assert _cli("index", *base, "--verify").exit_code == 2
    fake_models.clear()
    res = _cli("index", *base)  # space freed: the same command resumes
    assert res.exit_code == 0 and "index ready" in res.output, res.output
    assert len(fake_models[0].encoded) == 20 - 6  # the first chunk was kept
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 0 and "index verified" in res.output


def test_chroma_error_without_cause_is_a_full_disk_only_when_space_is_low(
    tmp_path, passages, fake_embedder, monkeypatch
):
    _failing_add(monkeypatch, COMPACTION, after=0)
    monkeypatch.setattr(store, "free_bytes", lambda path: 300_000)
    with pytest.raises(DiskFullError, match=r"the disk is full: cannot write .*idx \(293.0 KB free there; Internal"):
        build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    monkeypatch.setattr(store, "free_bytes", lambda path: 50 << 30)  # plenty: not called a full disk
    with pytest.raises(InternalError, match="Failed to apply logs"):
        build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)


def test_full_disk_while_writing_bm25_names_the_file(tmp_path, passages, fake_embedder, monkeypatch):
    target = tmp_path / "idx" / "bm25" / "data.csc.index.npy"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(indexing, "build_bm25", full)
    with pytest.raises(DiskFullError, match=rf"the disk is full: cannot write {target} .*No space left"):
        build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)
    assert read_manifest(tmp_path / "idx")["status"] == "building"


def test_full_disk_on_open_is_no_damage(tmp_path, passages, fake_embedder, monkeypatch):
    """Chroma writes to its store even to read it: on a full disk opening fails, and the error must
    not send the user to --rebuild (which would drop a sound index and then fail for space too)."""
    build_index(passages, tmp_path / "idx", CFG, progress=False, embedder=fake_embedder)

    def full(path):
        raise InternalError(SQLITE_FULL)

    monkeypatch.setattr(store, "_persistent", full)
    with pytest.raises(DiskFullError, match=r"the disk is full: cannot write .*chroma .*run the command again") as err:
        open_retriever(tmp_path / "idx", CFG, embedder=fake_embedder)
    assert "--rebuild" not in str(err.value)


def test_resume_drops_a_store_chroma_cannot_read(tmp_path, persisted_passages, fake_embedder, monkeypatch, caplog):
    """A full disk while Chroma rewrites index_metadata.pickle leaves it cut short: the next build
    cannot resume those vectors, so it drops the store and embeds every passage again."""
    folder = tmp_path / "idx"
    _failing_add(monkeypatch, "Error in compaction: Failed to apply logs to the hnsw segment writer")
    with pytest.raises(InternalError):  # plenty of space here: not called a full disk
        build_index(persisted_passages, folder, CFG, progress=False, embedder=fake_embedder)
    monkeypatch.undo()
    (pickle,) = folder.glob("chroma/*/index_metadata.pickle")  # the first chunk (1024) was persisted
    pickle.write_bytes(b"")  # what the full disk left
    store.release(folder / "chroma")  # as a new process: Chroma reads the store from its files
    fake_embedder.encoded.clear()
    manifest = build_index(persisted_passages, folder, CFG, progress=False, embedder=fake_embedder)
    assert "cannot be read" in caplog.text and "embedding every passage again" in caplog.text
    assert len(fake_embedder.encoded) == len(persisted_passages) and manifest["status"] == "complete"
    assert verify_index(folder, CFG)["num_passages"] == len(persisted_passages)
    hits = open_retriever(folder, CFG.replace(mode="dense"), embedder=fake_embedder).retrieve("Eiffel Tower", 3)
    assert "Eiffel Tower" in [p.title for p in hits]


# ---- a real full disk: a tmpfs that is too small, then made bigger ----------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """Mount a tmpfs at a folder; yields a function that (re)mounts it with a size. Unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if not shutil.which("mount"):
        pytest.skip("no mount command here")
    mounted = []

    def size(kb: int) -> None:
        options = f"{'remount,' if mounted else ''}size={kb}k"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
        mounted.append(kb)

    yield mount, size
    if mounted:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# Where the disk fills, for the 1100-passage corpus with chromadb 1.5.9 (other versions may need other
# sizes): in Chroma's compaction (the error names no cause), or while Chroma persists the HNSW
# segment (its id map is left empty: the next build embeds every passage again).
STAGE = {1000: ("metadata segment", None), 1400: ("hnsw segment", "embedding every passage again")}


@pytest.mark.parametrize("kb", sorted(STAGE))
def test_real_full_disk_then_more_space(large_dataset, small_disk, kb):
    mount, size = small_disk
    size(kb)
    index = mount / "idx"
    base = ["--dataset", str(large_dataset), "--index-dir", str(index)]
    res = sharp("index", *base)  # each command a new process, as a user runs them
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"error: the disk is full: cannot write {index}")
    assert f"then resume with: sharp index --dataset {large_dataset} --index-dir {index}" in res.stderr
    stage, rerun_note = STAGE[kb]
    assert stage in res.stderr, f"the disk filled elsewhere than {stage!r} (retune STAGE's sizes): {res.stderr}"
    res = sharp("index", *base, "--verify")
    assert res.returncode == 2 and "incomplete" in res.stderr  # nothing left that looks whole
    size(64 << 10)
    res = sharp("index", *base)
    assert res.returncode == 0 and "index ready" in res.stdout, res.stderr
    assert rerun_note is None or rerun_note in res.stderr
    res = sharp("index", *base, "--verify")
    assert res.returncode == 0 and "index verified" in res.stdout, res.stderr
    res = sharp("retrieve", "mustard city", *base, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["passages"][0]["title"] == "Dijon"
