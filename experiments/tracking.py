"""The only place that talks to MLflow. A local sqlite store in the workspace by default.

Any tracking URI works: ``http://HOST:PORT`` (an ``mlflow server``, e.g. backed by PostgreSQL),
``postgresql://USER:PASSWORD@HOST:PORT/DB`` (the database itself), or ``sqlite:///PATH``. It is checked
before any work; errors name the URI with its password masked.

Runs left RUNNING by a dead process: every run this project starts records its process (tags
``sharp.host``, ``sharp.pid``, ``sharp.started``). A process that is killed outright (SIGKILL, out of
memory, power cut) cannot close its runs, so :func:`configure` - called first by every command -
marks the RUNNING runs of processes of this host that no longer exist as KILLED (tag ``sharp.ended``
says why). KILLED, not FAILED: MLflow's FAILED means the code hit an error, KILLED that the run was
stopped from outside, which is what happened (Ctrl-C and SIGTERM end runs KILLED too). Runs of other
hosts are left alone: only their host can tell whether their process lives.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from program.errors import StorageError, StoreError

log = logging.getLogger(__name__)

PARAM_MAX = 6000
HOST_TAG, PID_TAG, STARTED_TAG, ENDED_TAG = "sharp.host", "sharp.pid", "sharp.started", "sharp.ended"


class TrackingError(StoreError):
    """The tracking server or store cannot be reached or refused the request."""


def default_uri(ws: Path) -> str:
    return f"sqlite:///{ws / 'mlflow.db'}"


# MLflow 3's server starts a job runner beside the UI (six huey consumers and a periodic-task consumer:
# about half a core while idle on 2 cores, and some outlive the UI's SIGTERM); the UI needs none of them.
NO_JOB_RUNNER = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def ui_command(store_uri: str, host: str = "127.0.0.1", port: int = 5000) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the MLflow UI on ``store_uri``: one web worker, no job runner
    (unless the environment asks for one: MLFLOW_SERVER_ENABLE_JOB_EXECUTION is the user's to set)."""
    import sys

    from optimize.storage import redact_url

    if store_uri.startswith(("http://", "https://")):
        raise TrackingError(f"{redact_url(store_uri)} is a tracking server: its UI is there already, open it")
    argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store_uri]
    argv += ["--workers", "1", "--host", host, "--port", str(port)]
    return argv, {**NO_JOB_RUNNER, **os.environ}


def configure(tracking_uri: str | None, ws: Path, experiment: str = "sharp") -> str:
    """Point MLflow at ``tracking_uri`` (default: the workspace store); fail fast if it is down; close the
    runs that dead processes of this host left RUNNING."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from experiments.console import logs
    from optimize.storage import check_database, redact_url, scrub

    logs.adopt_library_loggers()  # MLflow's console handlers (and alembic's, below): to the log file
    uri = tracking_uri or default_uri(ws)
    shown = redact_url(uri)
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as resp:
                resp.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise TrackingError(
                f"MLflow tracking server {shown} is not reachable ({scrub(str(exc), uri)}); start it "
                f"(mlflow server --host 127.0.0.1 --port 5000) or drop --tracking-uri to use the local store"
            ) from None
    elif uri.startswith("sqlite:///"):
        _check_sqlite_store(Path(uri.split(":///", 1)[1]))
    else:
        check_database(uri, "the MLflow tracking store", TrackingError)
    mlflow.set_tracking_uri(uri)
    try:
        with _init_lock(ws, uri):  # the first use creates or migrates the store's tables
            mlflow.get_experiment_by_name(experiment)
        if mlflow.get_experiment_by_name(experiment) is None:
            location = (ws / "mlartifacts").as_uri() if not uri.startswith(("http://", "https://")) else None
            try:
                mlflow.create_experiment(experiment, artifact_location=location)
            except MlflowException as exc:  # another process created it meanwhile
                if mlflow.get_experiment_by_name(experiment) is None:
                    raise exc from None
        mlflow.set_experiment(experiment)
        logs.adopt_library_loggers()  # alembic's handlers, added by a new store's migrations
        reap_dead_runs()
    except MlflowException as exc:
        _raise_if_unwritable(uri, exc)
        raise TrackingError(f"the MLflow tracking store {shown} refused a request: {scrub(exc.message, uri)}") from None
    except Exception as exc:  # SQLAlchemy's own errors on a read-only or full store
        _raise_if_unwritable(uri, exc)
        raise
    return uri


def _raise_if_unwritable(uri: str, exc: Exception) -> None:
    """A StorageError naming the folder to fix when a SQLite store cannot be written (read-only, full)."""
    if uri.startswith("sqlite:") and _is_storage_problem(exc):
        store = uri.split(":///", 1)[-1]
        raise StorageError(
            f"cannot write the MLflow store {store} ({_first_line(exc)}): make {Path(store).parent} writable, "
            "or pass --workspace DIR (a writable folder) or --tracking-uri URI"
        ) from None


@contextmanager
def _init_lock(ws: Path, uri: str) -> Iterator[None]:
    """Serialize the first use of a database store by the processes of one workspace: two workers
    creating a new sqlite store at once race on its migrations ("duplicate column name")."""
    if uri.startswith(("http://", "https://")):
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    ws.mkdir(parents=True, exist_ok=True)
    with open(ws / ".tracking-init.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def process_tags() -> dict[str, str]:
    from optimize.workers import identity

    me = identity()
    return {HOST_TAG: me["host"], PID_TAG: str(me["pid"]), STARTED_TAG: str(me["started"])}


def reap_dead_runs() -> list[str]:
    """Mark KILLED the RUNNING runs whose process (on this host) is gone; return their ids."""
    from mlflow.tracking import MlflowClient

    from optimize.workers import is_gone

    client = MlflowClient()
    host = socket.gethostname().replace("'", "")
    ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return []
    runs = client.search_runs(
        ids, filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'", max_results=1000
    )
    reaped = []
    for run in runs:
        tags = run.data.tags
        worker = {"host": tags.get(HOST_TAG), "pid": tags.get(PID_TAG), "started": tags.get(STARTED_TAG)}
        if not is_gone(worker):
            continue
        client.set_tag(
            run.info.run_id,
            ENDED_TAG,
            f"process {worker['pid']} on {worker['host']} ended without closing the run (killed); "
            f"marked KILLED by process {process_tags()[PID_TAG]} at {time.strftime('%Y-%m-%d %H:%M:%S')}",
        )
        client.set_terminated(run.info.run_id, status="KILLED")
        reaped.append(run.info.run_id)
    if reaped:
        log.warning("marked %d run(s) left RUNNING by dead processes as KILLED: %s", len(reaped), ", ".join(reaped))
    return reaped


def _check_sqlite_store(store: Path) -> None:
    """A read-only store fails at once (MLflow would retry for a minute, then fail at the first write)."""
    target = store if store.exists() else store.parent
    if not os.access(target, os.W_OK) or (store.exists() and not os.access(store.parent, os.W_OK)):
        raise StorageError(
            f"cannot write the MLflow store {store} ({target} is read-only): make it writable, or pass "
            "--workspace DIR (a writable folder) or --tracking-uri URI"
        )


_STORAGE_MARKERS = (
    "readonly database",
    "read-only",
    "unable to open database file",
    "disk i/o",
    "database or disk is full",
)


def _is_storage_problem(exc: BaseException) -> bool:
    text = f"{exc} {exc.__cause__ or ''}".lower()
    return isinstance(exc, OSError) or any(marker in text for marker in _STORAGE_MARKERS)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def mlflow_name(name: str) -> str:
    """A param or metric name MLflow accepts (it refuses '@', e.g. 'all_gold@5' -> 'all_gold_at_5')."""
    return re.sub(r"[^\w\-. :/]", "_", name.replace("@", "_at_"))


def _leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, value) of every value of a nested mapping that is not itself a mapping."""
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _leaves(value, name + ".")
        else:
            yield name, value


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A (nested) settings dict as MLflow params: dotted names, lists as JSON, every value cut to PARAM_MAX."""
    out: dict[str, str] = {}
    for name, value in _leaves(values, prefix):
        text = json.dumps(value, default=str) if isinstance(value, (list, tuple)) else str(value)
        out[mlflow_name(name)] = text[:PARAM_MAX]
    return out


def numeric(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a (nested) metrics dict; CI pairs become _lo/_hi."""
    out: dict[str, float] = {}
    for name, value in _leaves(metrics, prefix):
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
            out[name + "_lo"], out[name + "_hi"] = float(value[0]), float(value[1])
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return {mlflow_name(k.replace("/", ".")): v for k, v in out.items()}


@contextmanager
def run(
    name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None, nested: bool = False
) -> Iterator[Any]:
    """An MLflow run that ends FAILED (not left running) when the block raises or is interrupted. Opened while
    another run is active (a step of `sharp build`), it is nested under that one."""
    import mlflow

    nested = nested or mlflow.active_run() is not None
    active = mlflow.start_run(run_name=name, nested=nested, tags={**process_tags(), **dict(tags or {})})
    try:
        if params:
            mlflow.log_params(flatten(params))
        yield active
    except KeyboardInterrupt:
        mlflow.end_run(status="KILLED")
        raise
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    else:
        mlflow.end_run(status="FINISHED")


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """The numeric entries of ``metrics`` (nested keys dotted) on the active run."""
    import mlflow

    mlflow.log_metrics(numeric(metrics), step=step)


def log_eval(result: Any, prefix: str = "") -> None:
    """Aggregate metrics, per-type metrics and the per-question table of an EvalResult."""
    import mlflow

    mlflow.log_metrics(numeric(result.metrics, prefix))
    for qtype, m in result.by_type.items():
        mlflow.log_metrics(numeric(m, f"{prefix}type.{qtype}."))
    rows = [
        {k: (json.dumps(v, default=str) if isinstance(v, (list, dict)) else v) for k, v in r.items() if k != "trace"}
        for r in result.rows
    ]
    if rows:
        mlflow.log_table(data=_columns(rows), artifact_file=f"{prefix}questions.json")
    log_json({"rows": result.rows}, f"{prefix}questions_with_traces.json")


def _columns(rows: list[dict]) -> dict[str, list]:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in keys}


def log_json(obj: Any, name: str) -> None:
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps(obj, indent=2, default=str))
        mlflow.log_artifact(str(path))


def log_file(path: Path, artifact_path: str | None = None) -> None:
    import mlflow

    mlflow.log_artifact(str(path), artifact_path=artifact_path)


def enable_dspy_traces() -> None:
    """Let mlflow.dspy record a trace per program call (LM inputs/outputs, per predictor)."""
    import mlflow

    mlflow.dspy.autolog(log_traces=True, log_compiles=False, log_evals=False, silent=True)


def disable_dspy_traces() -> None:
    import mlflow

    mlflow.dspy.autolog(disable=True, silent=True)


@contextmanager
def dspy_traces(enabled: bool = True) -> Iterator[None]:
    """One DSPy trace per question in MLflow while the block runs (``sharp eval``, ``sharp demo``,
    ``sharp arena``; off with ``--no-traces``): each program call becomes a trace with a span per module,
    predictor and LM call, attached to the MLflow run active when the question was asked. Traces are
    switched off again when the block ends, so a later step of the same process records none."""
    if not enabled:
        yield
        return
    import dspy
    from mlflow.dspy.callback import MlflowCallback

    enable_dspy_traces()
    try:
        seen = dspy.settings.callbacks or []
        if any(isinstance(c, MlflowCallback) for c in seen):
            yield
        else:  # inside a dspy.context, which keeps the callbacks it started with: add it there too
            with dspy.context(callbacks=[*seen, MlflowCallback()]):
                yield
    finally:
        disable_dspy_traces()


def log_params(values: Mapping[str, Any]) -> None:
    """``values`` (nested keys dotted, long values cut) as params of the active run."""
    import mlflow

    mlflow.log_params(flatten(values))
