"""An exported program answers identically after loading in a new process.

    python -m experiments.benchmarks.export_parity models:/NAME/VERSION [--dataset hotpotqa --split dev --n 3]

First this process reads the registered model's program JSON (checksum and code-version checks) and
answers N seeded questions with it; then a *new* Python process loads the same model through
``mlflow.pyfunc.load_model`` (the path `mlflow models serve` takes) and answers the same questions.
DSPy's answer cache is off in both, so every answer is computed by the model, not replayed. Answers,
evidence ids, stop reasons and LM call counts are compared. Writes WORKSPACE/benchmarks/export_parity.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price-table fetch

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

COMPARED = ("answer", "passage_ids", "stop_reason", "retries", "lm_calls")

CHILD = """
import json, sys
import mlflow
from experiments.runtime import configure_cache
configure_cache(False, None)
mlflow.set_tracking_uri(sys.argv[1])
questions = json.loads(sys.stdin.read())
model = mlflow.pyfunc.load_model(sys.argv[2])
frame = model.predict({"question": questions})
print("@@ROWS@@" + frame.to_json(orient="records"))
"""


def rows_in_process(model_uri: str, questions: list[str], workspace: Path, tracking_uri: str) -> list[dict]:
    from experiments.export import load_for_serving, predict_rows, resolve_program_path

    path = resolve_program_path(model_uri, workspace, tracking_uri=tracking_uri)
    module = load_for_serving(path)
    return json.loads(predict_rows(module, questions).to_json(orient="records"))


def rows_in_new_process(model_uri: str, questions: list[str], tracking_uri: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, tracking_uri, model_uri],
        input=json.dumps(questions),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the loading process failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("@@ROWS@@")), None)
    if line is None:
        raise RuntimeError(f"the loading process printed no rows:\n{out.stdout[-2000:]}")
    return json.loads(line[len("@@ROWS@@") :])


def main(argv: list[str] | None = None) -> int:
    from experiments import settings, tracking
    from experiments.runtime import Runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_uri")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workspace", type=Path, default=None)
    ap.add_argument("--tracking-uri", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    ws = settings.workspace(args.workspace)
    uri = tracking.configure(args.tracking_uri, ws)
    rt = Runtime(dataset=args.dataset, workspace=ws, cache=False)  # DSPy's cache off in this process
    questions = [e.question for e in rt.examples(args.split, args.n, args.seed)]

    t0 = time.perf_counter()
    here = rows_in_process(args.model_uri, questions, ws, uri)
    t1 = time.perf_counter()
    there = rows_in_new_process(args.model_uri, questions, uri)
    t2 = time.perf_counter()

    diffs = [
        {"question": a["question"], "field": f, "in_process": a.get(f), "new_process": b.get(f)}
        for a, b in zip(here, there)
        for f in COMPARED
        if a.get(f) != b.get(f)
    ]
    report = {
        "model_uri": args.model_uri,
        "questions": len(questions),
        "identical": not diffs and len(here) == len(there),
        "differences": diffs,
        "in_process_seconds": round(t1 - t0, 1),
        "new_process_seconds": round(t2 - t1, 1),
        "rows": [{f: r.get(f) for f in ("question",) + COMPARED} for r in here],
    }
    out = ws / "benchmarks" / "export_parity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    same = sum(all(a.get(f) == b.get(f) for f in COMPARED) for a, b in zip(here, there))
    log.info(
        "%d/%d questions identical (%s) in a new process; report: %s", same, len(questions), ", ".join(COMPARED), out
    )
    return 0 if report["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
