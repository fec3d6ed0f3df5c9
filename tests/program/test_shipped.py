"""Shipped compiled programs: the manifest, checksums, and which program a command runs by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import ScriptedLM, assign

from experiments.runtime import Runtime
from program.errors import ProgramFileError
from program.lm import LMConfig
from program.serving import shipped
from program.serving.saved import read_program, save_program
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig

LM = "local/qwen2.5-coder-1.5b"


def compiled(retriever) -> SharpRAG:
    prog = SharpRAG(retriever, SharpConfig(accept_threshold=0.55))
    assign(prog, {r: ScriptedLM(r, []) for r in ("planner", "critic", "generator", "composer")})
    return prog


def ship(folder: Path, retriever, corpus: str = "c0ffee", lm: str = LM) -> Path:
    path = save_program(folder / "sharp-x.json", compiled(retriever), "sharp", index_manifest={"corpus_sha256": corpus})
    entry = shipped.manifest_entry(path, {"system": "sharp", "corpus_sha256": corpus, "lm": lm, "compiled_on": "t"})
    (folder / shipped.MANIFEST).write_text(json.dumps({"programs": {"sharp-x": entry}}))
    return path


def test_the_program_for_this_corpus_and_model_is_found(tmp_path, retriever):
    path = ship(tmp_path, retriever)
    found = shipped.default_program("c0ffee", LM, tmp_path)
    assert found is not None and found.path == path and "sharp-x" in found.describe()
    assert read_program(found.path).config["accept_threshold"] == 0.55
    assert shipped.default_program("other-corpus", LM, tmp_path) is None
    assert shipped.default_program("c0ffee", "openai/gpt-4o-mini", tmp_path) is None
    assert shipped.default_program(None, LM, tmp_path) is None
    assert shipped.default_program("c0ffee", LM, tmp_path / "empty") is None  # no manifest: none shipped


def test_a_changed_or_missing_program_file_is_refused_by_name(tmp_path, retriever):
    path = ship(tmp_path, retriever)
    path.write_text(path.read_text().replace("0.55", "0.65"))
    with pytest.raises(ProgramFileError, match="does not match its entry"):
        shipped.default_program("c0ffee", LM, tmp_path)
    path.unlink()
    with pytest.raises(ProgramFileError, match="sharp-x.*missing"):
        shipped.shipped_programs(tmp_path)
    (tmp_path / shipped.MANIFEST).write_text("{not json")
    with pytest.raises(ProgramFileError, match="MANIFEST.json is not readable"):
        shipped.shipped_programs(tmp_path)


def test_the_repository_s_manifest_checks_out():
    programs = shipped.shipped_programs()
    assert any(s.name == "sharp-hotpotqa" for s in programs), [s.name for s in programs]  # the default ships
    for s in programs:  # every shipped program hashes as recorded and loads
        saved = read_program(s.path)
        assert saved.system == s.entry["system"] and saved.index_manifest.get("corpus_sha256") == s.corpus_sha256


class _Runtime(Runtime):
    def index_manifest(self) -> dict:
        return {"corpus_sha256": "c0ffee"}


def test_runtime_default_program_none_and_default(tmp_path, retriever, monkeypatch):
    path = ship(tmp_path, retriever)
    monkeypatch.setattr(shipped, "COMPILED_DIR", tmp_path)
    rt = _Runtime(workspace=tmp_path / "ws", lm_config=LMConfig().with_overrides(lm=LM), cache=False)
    assert rt.program_path(None, "sharp") == path  # nothing given: the shipped program
    assert rt.program_path("default", "sharp") == path
    assert rt.program_path("none", "sharp") is None  # the uncompiled SHARP
    assert rt.program_path(None, "vanilla") is None  # only SHARP has a shipped default
    other = _Runtime(workspace=tmp_path / "ws", lm_config=LMConfig().with_overrides(lm="openai/x"), cache=False)
    assert other.program_path(None, "sharp") is None  # another model: uncompiled, said in the log
    with pytest.raises(ProgramFileError, match="no shipped compiled program fits"):
        other.program_path("default", "sharp")
    assert rt.program_path(str(path), "sharp") == path


def test_ship_copies_without_machine_paths_and_records_what_it_was_compiled_on(tmp_path, retriever):
    from experiments.jobs.ship import ship_program

    src = save_program(
        tmp_path / "src.json",
        compiled(retriever),
        "sharp",
        lm={"default": {"model": LM}},
        index_manifest={"corpus_sha256": "c0ffee"},
        meta={"dataset": "hotpotqa", "index_dir": "/home/me/ws/indexes/hotpotqa", "study": "s"},
    )
    folder = tmp_path / "compiled"
    out = ship_program(src, "sharp-x", commands=["sharp tune ..."], figures={"em": 0.4}, folder=folder)
    saved = read_program(out)  # its checksum holds after the edit
    assert "index_dir" not in saved.meta and saved.meta["study"] == "s"
    (found,) = shipped.shipped_programs(folder)
    assert (
        found.entry["lm"] == LM
        and found.entry["commands"] == ["sharp tune ..."]
        and found.entry["figures"]["em"] == 0.4
    )
    assert shipped.default_program("c0ffee", LM, folder).path == out
    bare = save_program(tmp_path / "bare.json", compiled(retriever), "sharp")
    with pytest.raises(ProgramFileError, match="records no index corpus"):
        ship_program(bare, "bare", folder=folder)
