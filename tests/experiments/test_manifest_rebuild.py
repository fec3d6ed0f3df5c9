"""Each program shipped in program/compiled/ rebuilds from the committed recording of its corpus's train rounds
(experiments/results/recordings/), byte for byte, by the product command its MANIFEST.json entry records, with no
LM call: tested for MuSiQue. The index the program was compiled over is pinned by its manifest (recorded in the
program); the replay reads the passages' text from the corpus and never searches, so the index here is its
manifest and its passages, and the searcher a stand-in that a replay never calls."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
from doubles import KeywordRetriever
from typer.testing import CliRunner

from experiments.cli import app
from program.serving import shipped

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "experiments" / "results" / "recordings"
DATA = Path(os.environ.get("SHARP_DATA") or ROOT.parent / "shared" / "datasets")
CORPUS = "musique"


def rebuild(entry: dict, dataset: str, tmp: Path, tracking_uri: str, monkeypatch) -> Path:
    """Run ``entry``'s command in a workspace holding its index (manifest and passages) and recording; the file
    it ships."""
    from data.corpus import load_corpus
    from experiments import rankers
    from experiments.runtime import Runtime

    program = json.loads((shipped.COMPILED_DIR / entry["file"]).read_text())
    index = tmp / "ws" / "indexes" / dataset
    (index / "bm25").mkdir(parents=True)
    (index / "manifest.json").write_text(json.dumps(program["index_manifest"]))
    with open(index / "bm25" / "passages.jsonl", "w") as fh:
        for p in load_corpus(DATA / dataset / "corpus.jsonl"):
            fh.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n")
    recording = program["config"]["gate"]["fitted_on"]["recording"]
    (tmp / "ws" / "recordings").mkdir(parents=True)
    with (
        gzip.open(RECORDINGS / f"{dataset}-train.jsonl.gz", "rb") as src,
        open(tmp / "ws" / "recordings" / recording, "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    monkeypatch.setattr(Runtime, "retriever", lambda self, overrides=None: KeywordRetriever([]))
    monkeypatch.setattr("optimize.recording.record_question", _no_lm_call)
    monkeypatch.setattr(rankers, "SHIPPED_RANKERS", ROOT / "program" / "compiled" / "rankers")  # its shipped ranker
    monkeypatch.setattr(shipped, "COMPILED_DIR", tmp / "compiled")
    args = shlex.split(entry["commands"][0])[1:]
    res = CliRunner().invoke(app, [*args, "--workspace", str(tmp / "ws"), "--tracking-uri", tracking_uri,
                                   "--experiment", "manifest-rebuild"])  # fmt: skip
    assert res.exit_code == 0, res.output
    return tmp / "compiled" / entry["file"]


def _no_lm_call(*args, **kwargs):
    raise AssertionError("a rebuild from the committed recording called the LM")


def test_the_shipped_musique_program_rebuilds_from_the_committed_recording(tmp_path, tracking_uri, monkeypatch):
    entry = shipped.read_manifest().get(f"sharp-{CORPUS}")
    if entry is None:
        pytest.skip(f"no sharp-{CORPUS} shipped")
    command = (entry.get("commands") or [""])[0]
    if not command.startswith("sharp build "):
        pytest.skip(f"sharp-{CORPUS} was shipped before `sharp build` ({command}): re-ship it with `sharp build`")
    if not (DATA / CORPUS / "corpus.jsonl").is_file():
        pytest.skip(f"the {CORPUS} corpus is not at {DATA}")
    out = rebuild(entry, CORPUS, tmp_path, tracking_uri, monkeypatch)
    assert shipped.file_sha256(out) == entry["sha256"]
