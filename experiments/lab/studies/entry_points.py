"""One question through the three ways a program is run, compared: `sharp ask --json`, ``program.load(...)``
in Python, and ``mlflow.pyfunc.load_model(...)`` of the program exported as an MLflow model.

    python -m experiments.lab.studies.entry_points [--question Q] [--dataset hotpotqa] [--program PATH]
        [--lm MODEL [--api-base URL]] [--workspace WS] [--tracking-uri URI] [--out FILE]

DSPy's answer cache is off in all three, so each computes its answer. Without --program, `sharp ask` and
``load(DATASET)`` each take their default (the corpus's shipped program for the model); the exported model
holds the program ``load`` took (an MLflow model is exported from a file). Without --lm, all three use the
default model (the exported model the LM config saved in the program, which for the shipped program is the
default model; with --lm, $SHARP_LM and $SHARP_API_BASE, as `mlflow models serve` takes them). The export is
registered in a tracking store of its own (a sqlite file in a temporary folder unless --tracking-uri), so
the workspace's runs are left alone. `sharp ask` runs in this process, as the CLI's own code (typer's runner);
the local model is unloaded between paths, so each starts cold (no prompt prefix kept from another). Writes a JSON file: per path the answer, stop reason, passage and cited
ids, LM calls and the trace (its steps without the seconds each took); whether the answers and the traces are
the same, and every difference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lab.studies import show

QUESTION = "Castle Hill is a plantation near what primary residence of Thomas Jefferson?"
PATHS = ("sharp ask", "program.load", "mlflow.pyfunc")
FIELDS = ("answer", "stop_reason", "passage_ids", "cited_ids", "lm_calls", "trace")
TIMING = "seconds"  # a step's wall-clock time: the one part of a trace that differs between identical runs


def summary(answer: str, stop: str, passages: Sequence[str], cited: Sequence[str], calls: int, trace: Any) -> dict:
    """What is compared of one path's prediction; the trace as JSON carries it, without the steps' seconds."""
    steps = json.loads(trace) if isinstance(trace, str) else json.loads(json.dumps(trace, default=str))
    return {
        "answer": answer,
        "stop_reason": stop,
        "passage_ids": list(passages),
        "cited_ids": list(cited),
        "lm_calls": int(calls),
        "trace": [{k: v for k, v in step.items() if k != TIMING} for step in steps],
    }


def compare(paths: Mapping[str, dict]) -> dict:
    """Every field of every path against the first path's: where they differ (a trace by its first step)."""
    first, *others = paths
    differences = []
    for name in others:
        for field in FIELDS:
            a, b = paths[first][field], paths[name][field]
            if a == b:
                continue
            if field == "trace":
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                differences.append(
                    {"path": name, "field": field, "first_step": at, first: a[at : at + 1], name: b[at : at + 1]}
                )
            else:
                differences.append({"path": name, "field": field, first: a, name: b})
    fields = {d["field"] for d in differences}
    return {"same_answer": "answer" not in fields, "same_trace": "trace" not in fields, "differences": differences}


def through_cli(args: argparse.Namespace) -> dict:
    """`sharp ask QUESTION --json --no-cache` with the given place, program and model."""
    from typer.testing import CliRunner

    from experiments.cli import app

    argv = ["ask", args.question, "--json", "--no-cache", "--dataset", args.dataset, "--workspace", str(args.workspace)]
    for flag, value in (("--program", args.program), ("--lm", args.lm), ("--api-base", args.api_base)):
        argv += [flag, str(value)] if value else []
    result = CliRunner().invoke(app, argv)
    lines = [line for line in (result.stdout or "").splitlines() if line.startswith("{")]
    if result.exit_code != 0 or not lines:
        raise SystemExit(f"sharp {' '.join(argv)} failed (exit {result.exit_code}):\n{result.output[-3000:]}")
    out = json.loads(lines[-1])
    ids = [p["id"] for p in out["passages"]]
    return summary(out["answer"], out["stop_reason"], ids, out["cited_ids"], out["cost"]["lm_calls"], out["trace"])


def through_load(args: argparse.Namespace) -> tuple[dict, Any]:
    """``program.load(...)`` and one question; with what was loaded (its file and index, for the export)."""
    from program import load

    qa = load(args.program or args.dataset, workspace=args.workspace, lm=args.lm, api_base=args.api_base, cache=False)
    pred = qa(question=args.question)
    ids = [p.id for p in pred.passages]
    return summary(pred.answer, pred.stop_reason, ids, pred.cited_ids, pred.cost["lm_calls"], pred.trace), qa.info


@contextlib.contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """The environment with ``values`` set (None: left as it is), as it was afterwards."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v})
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def through_pyfunc(args: argparse.Namespace, program_file: Path, index_dir: Path, store_dir: Path) -> dict:
    """The program exported (`sharp export`'s code) and loaded with ``mlflow.pyfunc.load_model``; one question."""
    import mlflow

    from experiments import tracking
    from experiments.export import PROGRAM_ARTIFACT_DIR, export_run

    tracking.configure(args.tracking_uri or f"sqlite:///{store_dir / 'mlflow.db'}", store_dir, "entry-points")
    with tracking.run("entry-points: the program to export", tags={"kind": "study"}) as run:
        mlflow.log_artifact(str(program_file), artifact_path=PROGRAM_ARTIFACT_DIR)
    exported = export_run(run.info.run_id, args.model_name, index_dir=index_dir, bundle_code=False)
    with environment({"SHARP_LM": args.lm, "SHARP_API_BASE": args.api_base}):
        model = mlflow.pyfunc.load_model(exported.model_uri)
        row = model.predict({"question": [args.question]}).iloc[0]
    if row["error"]:
        raise SystemExit(f"the exported model failed: {row['error']}")
    passages, cited = list(row["passage_ids"]), list(row["cited_ids"])
    return summary(row["answer"], row["stop_reason"], passages, cited, row["lm_calls"], row["trace"])


def main(argv: Sequence[str] | None = None) -> dict:
    from experiments import settings
    from experiments.runtime import configure_cache
    from program.lm.local import unload_all
    from program.serving.defaults import DEFAULT_DATASET

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--dataset", default=DEFAULT_DATASET)
    ap.add_argument("--program", type=Path, default=None, help="a program file (default: each path's default)")
    ap.add_argument("--lm", default=None, help="the model of every role (default: the default model)")
    ap.add_argument("--api-base", default=None)
    ap.add_argument("--workspace", type=Path, default=None)
    ap.add_argument("--tracking-uri", default=None, help="where the export is registered (default: a temporary store)")
    ap.add_argument("--model-name", default="sharp-entry-points")
    ap.add_argument("--out", type=Path, default=settings.PROJECT_ROOT / "experiments/results/entry-points.json")
    args = ap.parse_args(argv)
    args.workspace = settings.workspace(args.workspace)

    configure_cache(False, None)  # every path computes its answer
    paths = {PATHS[0]: through_cli(args)}
    unload_all()  # each path starts with the local model cold (no prompt prefix kept), as a new process would
    paths[PATHS[1]], info = through_load(args)
    unload_all()
    with tempfile.TemporaryDirectory() as store:
        paths[PATHS[2]] = through_pyfunc(args, info.program, info.index, Path(store))
    out = {
        "question": args.question,
        "program": {"name": info.name, "file": info.program, "system": info.system},
        "index": info.index,
        "models": info.models,
        "cache": False,
        **compare(paths),
        "paths": paths,
    }
    out = settings.portable(out, args.workspace)
    show(out, args.out)
    return out


if __name__ == "__main__":
    main()
