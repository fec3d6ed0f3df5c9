"""Export: a registered MLflow model (code + JSON, no pickle) that answers like the program it holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest

import experiments.export as ex
from experiments import tracking
from experiments.export import ExportError, export_run, find_program, load_for_serving, resolve_program_path
from experiments.jobs.compile_job import CompileJob, SaveInfo, run_compile
from program.digest import digest
from program.errors import IndexMismatchError, ProgramFileError
from program.serving.saved import read_program


@pytest.fixture
def compiled(world, tmp_path, tracked, monkeypatch):
    """A compile run whose program remembers an index folder; serving uses the toy retriever and LMs."""
    index = tmp_path / "index"
    index.mkdir()
    (index / "manifest.json").write_text(json.dumps({"corpus_sha": "toy", "built_at": "today"}))
    examples = world.examples()
    out = run_compile(
        CompileJob(optimizer="bootstrap", name="toy"),
        world.program(),
        examples[:6],
        examples[3:],
        out_dir=tmp_path / "compile",
        programs_dir=tmp_path / "programs",
        save=SaveInfo(
            retriever={"mode": "bm25"},
            lm={"default": {"model": "openai/x"}},
            index_manifest={"corpus_sha": "toy", "built_at": "yesterday"},
            meta={"dataset": "toy", "index_dir": str(index)},
        ),
    )
    opened = []

    def open_retriever(index_dir, settings):
        opened.append((Path(index_dir), settings))
        return world.retriever()

    monkeypatch.setattr(ex, "open_index_retriever", open_retriever)
    monkeypatch.setattr(ex, "assign_program_lms", lambda module, lm: world.assign(module))
    return out, index, opened


def test_export_registers_a_model_that_predicts_like_the_program(world, compiled, tracked, tmp_path):
    out, index, opened = compiled
    exp = export_run(out.run_id, "toy-sharp", bundle_code=False)
    assert exp.model_uri == "models:/toy-sharp/1"
    version = mlflow.tracking.MlflowClient().get_model_version("toy-sharp", "1")
    assert version.tags["source_run"] == out.run_id and version.tags["system"] == "sharp"

    model = mlflow.pyfunc.load_model(exp.model_uri)
    assert opened == [(index, {"mode": "bm25"})]  # the recorded index, the saved retriever settings
    questions = [c.question for c in world.cases]
    got = model.predict(pd.DataFrame({"question": questions}))
    reference = out.module
    for q, row in zip(questions, got.to_dict("records")):
        pred = reference(question=q)
        assert row["answer"] == pred.answer and row["stop_reason"] == pred.stop_reason
        assert list(row["passage_ids"]) == [p.id for p in pred.passages] and row["retries"] == pred.retries
    bad = model.predict(pd.DataFrame({"question": ["   "]})).iloc[0]
    assert bad["stop_reason"] == "error" and "empty question" in bad["error"]

    # no pickle anywhere in the model; the program inside is the verified JSON
    local = Path(mlflow.artifacts.download_artifacts(exp.model_uri, dst_path=str(tmp_path / "dl")))
    assert not list(local.rglob("*.pkl"))
    assert read_program(find_program(local)).state == read_program(out.path).state
    # sharp ask --program models:/... resolves to the same program file
    path = resolve_program_path(exp.model_uri, tmp_path / "ws")  # as `sharp ask` calls it
    assert read_program(path).meta["run_id"] == out.run_id
    path = resolve_program_path(exp.model_uri, tmp_path / "ws", tracking_uri=tracked.uri)
    assert read_program(path).meta["run_id"] == out.run_id
    assert resolve_program_path(out.path) == out.path


def test_exported_code_is_bundled(world, compiled, tracked, tmp_path):
    out, _, _ = compiled
    exp = export_run(out.run_id, "toy-bundled")
    local = Path(mlflow.artifacts.download_artifacts(exp.model_uri, dst_path=str(tmp_path / "dl")))
    assert (local / "code" / "program" / "serving" / "saved.py").is_file()
    assert (local / "code" / "experiments" / "export.py").is_file()
    assert "set_model(SharpProgram())" in (local / "sharp_model.py").read_text()


def test_runs_without_a_program_and_unknown_runs_are_refused(tracked):
    with tracking.run("empty"):
        run_id = mlflow.active_run().info.run_id
    with pytest.raises(ExportError, match="has no program artifact"):
        export_run(run_id, "nothing")
    with pytest.raises(ExportError, match="no run 'f00'"):
        export_run("f00", "nothing")
    with pytest.raises(ProgramFileError, match="no program at"):
        resolve_program_path("/no/such/program.json")
    with pytest.raises(ProgramFileError, match="cannot fetch models:/missing/1"):
        resolve_program_path("models:/missing/1", tracked.ws)


def test_a_tampered_program_is_refused(compiled, tracked):
    out, _, _ = compiled
    artifact_dir = Path(mlflow.get_run(out.run_id).info.artifact_uri.removeprefix("file://")) / "program"
    target = artifact_dir / out.path.name
    body = json.loads(target.read_text())
    body["config"]["confidence_threshold"] = 0.01
    target.write_text(json.dumps(body))
    with pytest.raises(ProgramFileError, match="modified after it was saved"):
        export_run(out.run_id, "tampered")
    with pytest.raises(ProgramFileError, match="modified after it was saved"):
        load_for_serving(target)


def test_a_program_from_another_code_version_is_refused(compiled, tmp_path):
    out, _, _ = compiled
    body = json.loads(out.path.read_text())
    body.pop("sha256")
    body["code_version"] = "0.0.1"
    body["sha256"] = digest(body)
    other = tmp_path / "old.json"
    other.write_text(json.dumps(body))
    with pytest.raises(ProgramFileError, match="code version 0.0.1"):
        load_for_serving(other)


def test_an_index_that_does_not_match_is_refused(compiled, monkeypatch):
    out, index, _ = compiled
    (index / "manifest.json").write_text(json.dumps({"corpus_sha": "other", "built_at": "today"}))
    with pytest.raises(IndexMismatchError, match="corpus_sha"):
        load_for_serving(out.path)
    monkeypatch.setenv("SHARP_INDEX_DIR", str(index.parent / "elsewhere"))
    assert load_for_serving(out.path) is not None  # the override is used (no manifest there)


def test_an_index_rebuilt_from_the_same_corpus_is_the_same_index(tmp_path):
    """When and how fast an index was built (completed_at, timings) is not what it holds: a rebuilt index of the
    same corpus serves an exported program; another corpus does not."""
    from program.serving.saved import SavedProgram

    built = {"corpus_sha256": "a" * 64, "completed_at": "2026-12-05", "timings": {"build_seconds": 230.6}}
    saved = SavedProgram("sharp", {}, {}, {}, {}, built, {})
    rebuilt = {**built, "completed_at": "2026-12-06", "timings": {"build_seconds": 129.5}}
    (tmp_path / "manifest.json").write_text(json.dumps(rebuilt))
    ex.check_manifest(saved, tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**rebuilt, "corpus_sha256": "b" * 64}))
    with pytest.raises(IndexMismatchError, match="keys: corpus_sha256"):
        ex.check_manifest(saved, tmp_path)


# a model exported by the code before the loop's parts moved into rooms (program/sharp/, program/serving/,
# experiments/jobs/ ...): its model code imports experiments.export, its program names the "sharp" system
BEFORE_THE_MOVE = Path(__file__).parent / "fixtures" / "exported-before-rooms"


def test_a_model_exported_before_the_move_still_loads_and_answers(world, tmp_path, monkeypatch):
    model_dir = tmp_path / "model"
    shutil.copytree(BEFORE_THE_MOVE, model_dir)
    index = tmp_path / "index"
    index.mkdir()
    (index / "manifest.json").write_text(json.dumps({"corpus_sha": "toy", "built_at": "today"}))
    monkeypatch.setenv("SHARP_INDEX_DIR", str(index))
    monkeypatch.setattr(ex, "open_index_retriever", lambda index_dir, settings: world.retriever())
    monkeypatch.setattr(ex, "assign_program_lms", lambda module, lm: world.assign(module))
    model = mlflow.pyfunc.load_model(str(model_dir))
    saved = read_program(model_dir / "artifacts" / "program.json")
    reference = load_for_serving(model_dir / "artifacts" / "program.json")
    questions = [c.question for c in world.cases[:3]]
    rows = model.predict(pd.DataFrame({"question": questions})).to_dict("records")
    assert saved.system == "sharp" and [r["error"] for r in rows] == [None] * 3
    assert [r["answer"] for r in rows] == [reference(question=q).answer for q in questions]
