"""Export a compiled or tuned program as an MLflow model; resolve ``models:/`` URIs to program files.

The exported model is *code plus JSON*, never a pickle: MLflow's "models from code" stores a
five-line script (``MODEL_CODE``) whose ``load_context`` reads the program JSON through
:mod:`program.serving.saved` (checksum and code-version checks included), opens the retriever from the
index directory and assigns LMs from the program's LM config. The project's packages travel as
``code_paths`` (or come from the installed ``sharp-rag`` distribution).

Serving::

    mlflow models serve -m models:/NAME/VERSION --env-manager local -p 5001
    curl -s localhost:5001/invocations -H 'Content-Type: application/json' \\
         -d '{"dataframe_records": [{"question": "..."}]}'

At load time ``SHARP_INDEX_DIR`` overrides the index directory recorded at export (or bundled
with ``--include-index``); ``SHARP_LM`` / ``SHARP_API_BASE`` override the default LM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import settings, tracking
from program.errors import IndexMismatchError, ProgramFileError, SharpError
from program.serving.saved import SavedProgram, find_program, load_into, read_program, without_lms

log = logging.getLogger(__name__)

PROGRAM_ARTIFACT_DIR = "program"
MODEL_CODE = '''"""A SHARP program served by MLflow (model from code: no pickle is loaded)."""
import mlflow
from mlflow.pyfunc import PythonModel

from experiments.export import load_for_serving, predict_rows


class SharpProgram(PythonModel):
    def load_context(self, context):
        self.module = load_for_serving(context.artifacts["program"], context.artifacts.get("index"),
                                       dict(context.model_config or {}))

    def predict(self, context, model_input, params=None):
        return predict_rows(self.module, model_input)


mlflow.models.set_model(SharpProgram())
'''
PACKAGES = ("program", "experiments")
# Manifest keys that describe when or where an index was built, not what it holds.
# manifest keys that change with no change to what retrieval returns: times and timings (completed_at,
# timings), paths, the file records (a repaired BM25 part), where the vectors live, the manifest's format
_VOLATILE = (
    "time",
    "timing",
    "created",
    "completed",
    "built",
    "seconds",
    "date",
    "path",
    "dir",
    "files",
    "store",
    "repaired",
    "format",
)


class ExportError(SharpError):
    """A run cannot be exported (no such run, no program artifact, ...)."""


# ---- loading (used inside the served model) ----------------------------------------------------
def open_index_retriever(index_dir: str | Path, retriever_settings: dict) -> Any:
    """The retriever over ``index_dir`` with the program's saved settings."""
    from program.retrieval import RetrieverConfig, open_retriever

    return open_retriever(Path(index_dir), RetrieverConfig.from_mapping(retriever_settings or {}))


def assign_program_lms(module: Any, lm_config: dict) -> None:
    """Give each predictor its role's LM from the saved LM config (env overrides applied)."""
    from program.lm.roles import LMConfig, assign_lms

    config = LMConfig.from_mapping(lm_config or {}).with_overrides(
        lm=os.environ.get("SHARP_LM") or None, api_base=os.environ.get("SHARP_API_BASE") or None
    )
    assign_lms(module, config)


def check_manifest(saved: SavedProgram, index_dir: Path) -> None:
    """Refuse an index whose manifest contradicts the one the program was compiled against."""
    path = index_dir / "manifest.json"
    if not saved.index_manifest or not path.exists():
        return
    current = json.loads(path.read_text())
    differ = sorted(
        k
        for k in set(saved.index_manifest) & set(current)
        if not any(v in k.lower() for v in _VOLATILE) and saved.index_manifest[k] != current[k]
    )
    if differ:
        raise IndexMismatchError(
            f"the index at {index_dir} differs from the one the program was built on "
            f"(keys: {', '.join(differ)}); point SHARP_INDEX_DIR at the right index or rebuild it"
        )


def load_saved(saved: SavedProgram, retriever: Any) -> Any:
    """:func:`program.serving.saved.load_into`, tolerant of states saved without ``lm`` slots."""
    return load_into(dataclasses.replace(saved, state=without_lms(saved.state)), retriever)


def load_for_serving(
    program_path: str | Path, index_artifact: str | None = None, model_config: dict | None = None
) -> Any:
    """Read and verify the program JSON, open its retriever, load it, assign LMs."""
    saved = read_program(program_path)
    config = model_config or {}
    index_dir = (
        os.environ.get("SHARP_INDEX_DIR") or index_artifact or config.get("index_dir") or saved.meta.get("index_dir")
    )
    if not index_dir:
        raise ProgramFileError(
            "no index directory for this program: set SHARP_INDEX_DIR or export it with --include-index"
        )
    check_manifest(saved, Path(index_dir))
    module = load_saved(saved, open_index_retriever(index_dir, saved.retriever))
    assign_program_lms(module, saved.lm)
    return module


def _questions(model_input: Any) -> list[str]:
    if isinstance(model_input, str):
        return [model_input]
    if hasattr(model_input, "columns"):  # a pandas DataFrame
        if "question" not in model_input.columns:
            raise ValueError(f"input needs a 'question' column, got {list(model_input.columns)}")
        values = list(model_input["question"])
    elif isinstance(model_input, dict):
        values = model_input.get("question")
        values = [values] if isinstance(values, str) else list(values or [])
    else:
        values = list(model_input)
    out = []
    for v in values:
        out += [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]
    return out


def predict_rows(module: Any, model_input: Any) -> Any:
    """Answer every question of ``model_input``; one row per question (a bad question gets ``error``), its
    trace as JSON text."""
    import pandas as pd

    rows = []
    for q in _questions(model_input):
        try:
            pred = module(question=q)
        except SharpError as exc:
            rows.append(
                {
                    "question": q,
                    "answer": "",
                    "cited_ids": [],
                    "passage_ids": [],
                    "passage_titles": [],
                    "retries": 0,
                    "stop_reason": "error",
                    "lm_calls": 0,
                    "trace": "[]",
                    "error": str(exc),
                }
            )
            continue
        rows.append(
            {
                "question": q,
                "answer": pred.answer,
                "cited_ids": list(pred.cited_ids),
                "passage_ids": [p.id for p in pred.passages],
                "passage_titles": [p.title for p in pred.passages],
                "retries": int(pred.retries),
                "stop_reason": pred.stop_reason,
                "lm_calls": int((pred.cost or {}).get("lm_calls", 0)),
                "trace": json.dumps(pred.trace, default=str),  # the steps, as `sharp ask --json` prints them
                "error": None,
            }
        )
    return pd.DataFrame(rows)


# ---- export --------------------------------------------------------------------------------------
@dataclass
class ExportOutcome:
    model_uri: str
    name: str
    version: str
    run_id: str
    program: SavedProgram


def _signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, DataType, Schema

    inputs = Schema([ColSpec(DataType.string, "question")])
    outputs = Schema(
        [
            ColSpec(DataType.string, "question"),
            ColSpec(DataType.string, "answer"),
            ColSpec(Array(DataType.string), "cited_ids"),
            ColSpec(Array(DataType.string), "passage_ids"),
            ColSpec(Array(DataType.string), "passage_titles"),
            ColSpec(DataType.long, "retries"),
            ColSpec(DataType.string, "stop_reason"),
            ColSpec(DataType.long, "lm_calls"),
            ColSpec(DataType.string, "trace", required=False),
            ColSpec(DataType.string, "error", required=False),
        ]
    )
    return ModelSignature(inputs=inputs, outputs=outputs)


def _requirements() -> list[str]:
    from importlib import metadata

    try:
        reqs = metadata.requires("sharp-rag") or []
    except metadata.PackageNotFoundError:
        return ["dspy==3.4.1", "mlflow==3.17.2", "pydantic>=2.7"]
    return [r for r in reqs if "extra ==" not in r]


def program_artifact(run_id: str, dst: Path) -> Path:
    """Download the program JSON a compile or tune run logged; a clear error when there is none."""
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    try:
        client.get_run(run_id)
    except MlflowException:
        raise ExportError(f"no run {run_id!r} in the tracking store {_store()}") from None
    files = [a.path for a in client.list_artifacts(run_id, PROGRAM_ARTIFACT_DIR) if a.path.endswith(".json")]
    if not files:
        raise ExportError(
            f"run {run_id} has no program artifact ({PROGRAM_ARTIFACT_DIR}/*.json); "
            f"export a `sharp compile` or `sharp tune` run"
        )
    if len(files) > 1:
        raise ExportError(f"run {run_id} has several programs ({', '.join(files)}); export one run per program")
    return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=files[0], dst_path=str(dst)))


def _artifacts(
    saved: SavedProgram, program_file: Path, index_dir: str | Path | None, include_index: bool
) -> tuple[Path | None, dict[str, str]]:
    """The index the model will use (``index_dir``, else the one the program records) and the model's
    artifacts (the program file, and the index with ``include_index``). The index, where found here,
    must be the one the program was saved with."""
    recorded = saved.meta.get("index_dir")
    index = Path(index_dir) if index_dir else (Path(recorded) if recorded else None)
    artifacts = {"program": str(program_file)}
    if index is not None and index.is_dir():
        check_manifest(saved, index)
        if include_index:
            artifacts["index"] = str(index)
    elif include_index:
        raise ExportError(f"--include-index: no index directory at {index}; pass --index-dir")
    else:
        log.warning("index directory %s not found here; the model will need SHARP_INDEX_DIR when loaded", index)
    return index, artifacts


def _log_model(
    name: str,
    code_file: Path,
    artifacts: dict[str, str],
    index: Path | None,
    bundle_code: bool,
    saved: SavedProgram,
    run_id: str,
) -> str:
    """Log the pyfunc model (``code_file``'s model over ``artifacts``) in the active run, registered
    as ``name``; returns the registered version."""
    import mlflow

    info = mlflow.pyfunc.log_model(
        name="model",
        python_model=str(code_file),
        artifacts=artifacts,
        model_config={"index_dir": str(index or "")},
        signature=_signature(),
        code_paths=[str(settings.PROJECT_ROOT / p) for p in PACKAGES] if bundle_code else None,
        pip_requirements=_requirements(),
        registered_model_name=name,
        metadata={"system": saved.system, "code_version": read_code_version(), "source_run": run_id},
    )
    return str(info.registered_model_version)


def _tag_version(name: str, version: str, run_id: str, saved: SavedProgram) -> None:
    """Tag the registered model version with its source run, system, dataset and objective."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    for key, value in (
        ("source_run", run_id),
        ("system", saved.system),
        ("dataset", str(saved.meta.get("dataset", ""))),
        ("objective", str(saved.meta.get("objective", saved.meta.get("metric", "")))),
    ):
        client.set_model_version_tag(name, version, key, value)


def export_run(
    run_id: str,
    name: str,
    *,
    index_dir: str | Path | None = None,
    include_index: bool = False,
    bundle_code: bool = True,
) -> ExportOutcome:
    """Register the program of run ``run_id`` as MLflow model ``name`` (tracking must be configured)."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        downloaded = program_artifact(run_id, tmp / "download")
        saved = read_program(downloaded)  # refuses a tampered file or another code version
        program_file = tmp / "program.json"
        shutil.copyfile(downloaded, program_file)
        index, artifacts = _artifacts(saved, program_file, index_dir, include_index)
        code_file = tmp / "sharp_model.py"
        code_file.write_text(MODEL_CODE)
        params = {
            "source_run": run_id,
            "name": name,
            "system": saved.system,
            "include_index": include_index,
            "bundle_code": bundle_code,
            "index_dir": str(index or ""),
        }
        with tracking.run(
            f"export {name}", params=params, tags={"kind": "export", "source_run": run_id, "system": saved.system}
        ) as active:
            version = _log_model(name, code_file, artifacts, index, bundle_code, saved, run_id)
            _tag_version(name, version, run_id, saved)
            return ExportOutcome(
                model_uri=f"models:/{name}/{version}",
                name=name,
                version=version,
                run_id=active.info.run_id,
                program=saved,
            )


def _store() -> str:
    """The tracking URI in force, password masked (for messages)."""
    import mlflow

    from optimize.storage import redact_url

    return redact_url(mlflow.get_tracking_uri())


def read_code_version() -> str:
    import program

    return program.__version__


# ---- resolving a program reference -----------------------------------------------------------------
def resolve_program_path(
    uri_or_path: str | Path, workspace: str | Path | None = None, tracking_uri: str | None = None
) -> Path:
    """A local program JSON for a path, a model folder, or an MLflow URI (``models:/NAME/VERSION``,
    ``models:/NAME@alias``, ``runs:/RUN_ID/program/x.json``), downloading artifacts as needed.

    MLflow URIs are read from ``tracking_uri`` when given, else from the tracking URI already set in
    this process, else from $MLFLOW_TRACKING_URI or the workspace's store. Downloads go to
    ``workspace/models/``.
    """
    ref = str(uri_or_path)
    if ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/")):
        import mlflow
        from mlflow.exceptions import MlflowException
        from mlflow.tracking._tracking_service.utils import is_tracking_uri_set

        ws = settings.workspace(workspace)
        if tracking_uri or not is_tracking_uri_set():
            tracking.configure(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"), ws)
        dst = ws / "models" / hashlib.sha256(ref.encode()).hexdigest()[:16]
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        if ref.startswith("models:/"):  # just the program file, not the bundled code and index
            try:
                return Path(
                    mlflow.artifacts.download_artifacts(
                        artifact_uri=f"{ref.rstrip('/')}/artifacts/program.json", dst_path=str(dst)
                    )
                )
            except (MlflowException, OSError):
                log.debug("%s has no artifacts/program.json; downloading the whole model", ref)
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=ref, dst_path=str(dst)))
        except MlflowException as exc:
            raise ProgramFileError(f"cannot fetch {ref} from {_store()}: {exc.message}") from None
        return local if local.is_file() else find_program(local)
    path = Path(ref).expanduser()
    if path.is_dir():
        return find_program(path)
    if path.is_file():
        return path
    raise ProgramFileError(f"no program at {ref}: give a program JSON file, a model folder or models:/NAME/VERSION")
