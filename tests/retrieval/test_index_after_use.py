"""Using an index never makes it look damaged, and real damage is still found after use.

Chroma writes to its store when a process opens it, even to read (program/retrieval/integrity.py
says which files and why): `chroma.sqlite3` always, and, in a store below Chroma's sync_threshold
(no index_metadata.pickle), every HNSW file, initialised anew from memory it does not clear. Each
`sharp` command is a new process, so the queries here run in a child process (tests/child_cli.py):
in the test process Chroma keeps its client cached and writes nothing on reopening.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from child_cli import sharp
from typer.testing import CliRunner

from experiments.cli import app
from program.retrieval.integrity import HNSW_FILES, HNSW_PICKLE, SQLITE_FILE

runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, [*args, "--no-progress"] if args[0] == "index" and "--verify" not in args else list(args))


def _used(base: list[str]) -> None:
    """`sharp retrieve` in a fresh process, as a user runs it after `sharp index`."""
    res = sharp("retrieve", "mustard city", *base, "--mode", "hybrid", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["passages"][0]["title"] == "Dijon"


def _digests(index) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in index.glob("chroma/**/*") if p.is_file()}


def _flip_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _segment(index):
    return next(p for p in (index / "chroma").iterdir() if p.is_dir())


@pytest.mark.parametrize("dataset", ["tiny_dataset", "large_dataset"])  # HNSW files: scratch, persisted
def test_index_stays_healthy_after_use(request, dataset, tmp_path, fake_models):
    folder = request.getfixturevalue(dataset)
    base = ["--dataset", str(folder), "--workspace", str(tmp_path)]
    assert _cli("index", *base).exit_code == 0
    index = tmp_path / "indexes" / folder.name
    assert (_segment(index) / HNSW_PICKLE).exists() == (dataset == "large_dataset")
    before = _digests(index)
    _used(base)
    assert _digests(index)[SQLITE_FILE] != before[SQLITE_FILE]  # the query's process did write to the store
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 0 and "index verified" in res.output, res.output
    res = _cli("index", *base)  # "up to date", never "damaged: --rebuild"
    assert res.exit_code == 0 and "index ready" in res.output, res.output


@pytest.mark.parametrize("dataset", ["tiny_dataset", "large_dataset"])
def test_index_of_format_2_stays_healthy_after_use(request, dataset, tmp_path, fake_models):
    """A manifest written before format 3 recorded a checksum for every HNSW file, scratch ones too."""
    folder = request.getfixturevalue(dataset)
    base = ["--dataset", str(folder), "--workspace", str(tmp_path)]
    assert _cli("index", *base).exit_code == 0
    index = tmp_path / "indexes" / folder.name
    manifest = json.loads((index / "manifest.json").read_text())
    for rel, want in manifest["files"].items():  # as e7f32ed's integrity.record wrote them
        if want.get("kind") != "sqlite":
            data = (index / rel).read_bytes()
            manifest["files"][rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["format"] = 2
    (index / "manifest.json").write_text(json.dumps(manifest))
    _used(base)
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 0 and "index verified" in res.output, res.output
    assert _cli("index", *base).exit_code == 0
    damaged = _segment(index) / "data_level0.bin" if dataset == "large_dataset" else index / "chroma" / SQLITE_FILE
    _truncate(damaged)  # still caught through the old records
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 2 and damaged.name in res.output and "--rebuild" in res.output


@pytest.fixture(scope="module")
def used_index(large_dataset, tmp_path_factory):
    """An index of PERSISTED passages that `sharp retrieve` has used once."""
    ws = tmp_path_factory.mktemp("ws")
    base = ["--dataset", str(large_dataset), "--workspace", str(ws)]
    res = sharp("index", *base)
    assert res.returncode == 0, res.stderr
    _used(base)
    return ws / "indexes" / large_dataset.name


DAMAGE = {
    "pickle deleted": (lambda seg: (seg / HNSW_PICKLE).unlink(), HNSW_PICKLE, "is missing"),
    "length.bin altered": (lambda seg: _flip_byte(seg / "length.bin"), "length.bin", "sha256 differs"),
    "data_level0.bin altered": (lambda seg: _flip_byte(seg / "data_level0.bin"), "data_level0.bin", "sha256 differs"),
    "link_lists.bin truncated": (lambda seg: _truncate(seg / "link_lists.bin"), "link_lists.bin", "truncated"),
    "header.bin deleted": (lambda seg: (seg / "header.bin").unlink(), "header.bin", "is missing"),
    "sqlite truncated": (lambda seg: _truncate(seg.parent / SQLITE_FILE), SQLITE_FILE, "truncated"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_real_damage_after_use_is_found(used_index, large_dataset, tmp_path, fake_models, kind):
    index = tmp_path / "indexes" / "large"
    shutil.copytree(used_index, index)
    damage, name, problem = DAMAGE[kind]
    damage(_segment(index))
    base = ["--dataset", str(large_dataset), "--workspace", str(tmp_path)]
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 2 and name in res.output and problem in res.output, res.output
    assert "--rebuild" in res.output and "Traceback" not in res.output
    res = _cli("index", *base)  # never "up to date"
    assert res.exit_code == 2 and name in res.output


def test_scratch_hnsw_files_hold_nothing_chroma_reads(tiny_dataset, tmp_path, fake_models):
    """Why scratch files are not checked: below sync_threshold Chroma answers from its log in
    chroma.sqlite3 and writes the HNSW files anew, so even deleting them loses nothing."""
    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path)]
    assert _cli("index", *base).exit_code == 0
    segment = _segment(tmp_path / "indexes" / "tiny")
    for name in HNSW_FILES:
        (segment / name).unlink()
    res = _cli("index", *base, "--verify")
    assert res.exit_code == 0 and "index verified" in res.output, res.output
    _used(base)
    assert {p.name for p in segment.iterdir()} >= HNSW_FILES
