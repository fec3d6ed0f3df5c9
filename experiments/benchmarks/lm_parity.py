"""The in-process backend and `sharp lm serve` give identical answers at temperature 0.

    python -m experiments.benchmarks.lm_parity [--model local/qwen2.5-coder-0.5b] [--port 8765]

A three-call chain (plan -> critique -> answer; the critique through DSPy's JSONAdapter, so
through a grammar-constrained JSON schema) runs on a few questions, first in-process, then
through a `sharp lm serve` subprocess, both from a fresh model and with DSPy's cache off.
Every LM output is compared verbatim. Writes WORKSPACE/benchmarks/lm_parity.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price-table fetch

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Literal

import dspy

EVIDENCE = {
    "Which country is the birthplace of the director of the film Ikiru?": "Ikiru is a 1952 Japanese film directed by Akira Kurosawa. Akira Kurosawa was born in Tokyo, Japan.",
    "What river flows through the city where the Eiffel Tower stands?": "The Eiffel Tower is a wrought-iron lattice tower in Paris. The Seine flows through Paris.",
    "Who wrote the novel that the film Blade Runner is based on?": "Blade Runner (1982) is based on the novel Do Androids Dream of Electric Sheep? by Philip K. Dick.",
}


class Plan(dspy.Signature):
    """Break the question into at most two short search queries, in the order to run them."""

    question: str = dspy.InputField()
    queries: list[str] = dspy.OutputField(desc="one to two search queries")


class Critique(dspy.Signature):
    """Judge whether the evidence is enough to answer the question."""

    question: str = dspy.InputField()
    evidence: str = dspy.InputField()
    verdict: Literal["sufficient", "insufficient"] = dspy.OutputField()
    missing: str = dspy.OutputField(desc="what is still missing, or 'nothing'")


class Answer(dspy.Signature):
    """Answer the question from the evidence with a short phrase."""

    question: str = dspy.InputField()
    evidence: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words")


def _fields(call) -> dict:
    """The prediction's fields, or the parse error (a weak model may break the format; both sides
    must then break it the same way)."""
    try:
        pred = call()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return dict(pred.toDict())


def chain(lm: dspy.BaseLM) -> list[dict]:
    plan, critique, answer = dspy.Predict(Plan), dspy.Predict(Critique), dspy.Predict(Answer)
    rows = []
    for question, evidence in EVIDENCE.items():
        row = {"question": question, "plan": _fields(lambda q=question: plan(question=q, lm=lm))}
        with dspy.context(adapter=dspy.JSONAdapter()):
            row["critique"] = _fields(lambda q=question, e=evidence: critique(question=q, evidence=e, lm=lm))
        row["answer"] = _fields(lambda q=question, e=evidence: answer(question=q, evidence=e, lm=lm))
        rows.append(row)
    return rows


def _raw_outputs(lm: dspy.BaseLM) -> list:
    return [h["outputs"] for h in lm.history]


def _normalized(outputs: list) -> list:
    """JSON texts as parsed objects: the OpenAI-compatible client re-serializes schema-constrained
    JSON (whitespace only), so a verbatim comparison would count that as a difference."""
    out = []
    for text in outputs:
        try:
            out.append(json.loads(text))
        except (TypeError, ValueError):
            out.append(text)
    return out


def in_process(model: str) -> tuple[list[dict], list, float]:
    from program.lm import LMSpec, build_lm
    from program.lm.local import unload_all

    lm = build_lm(LMSpec(model=model, cache=False, max_tokens=256), "generator")
    lm.engine.session.clear_states()
    t0 = time.perf_counter()
    rows = chain(lm)
    seconds = time.perf_counter() - t0
    unload_all()
    return rows, _raw_outputs(lm), seconds


def served(model: str, port: int) -> tuple[list[dict], list, float]:
    from program.lm import SERVED_MODEL, LMSpec, build_lm

    cmd = [sys.executable, "-m", "experiments.cli", "lm", "serve", "--model", model, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(
                        f"`sharp lm serve` did not start: {proc.stdout.read() if proc.stdout else ''}"
                    ) from None
                time.sleep(0.5)
        lm = build_lm(
            LMSpec(model=SERVED_MODEL, api_base=base, cache=False, max_tokens=256, timeout_s=600), "generator"
        )
        t0 = time.perf_counter()
        rows = chain(lm)
        return rows, _raw_outputs(lm), time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(model: str = "local/qwen2.5-coder-0.5b", port: int = 8765, out: Path | None = None) -> dict:
    local_rows, local_raw, local_s = in_process(model)
    served_rows, served_raw, served_s = served(model, port)
    same_raw = sum(a == b for a, b in zip(local_raw, served_raw))
    same_norm = sum(_normalized(a) == _normalized(b) for a, b in zip(local_raw, served_raw))
    result = {
        "model": model,
        "calls": len(local_raw),
        "identical_raw_outputs": same_raw,
        "identical_outputs_json_normalized": same_norm,
        "identical_answers": local_rows == served_rows,
        "in_process_s": round(local_s, 1),
        "served_s": round(served_s, 1),
        "in_process": local_rows,
        "served": served_rows,
        "raw": [{"in_process": a, "served": b} for a, b in zip(local_raw, served_raw)],
    }
    for a, b in zip(local_rows, served_rows):
        print(f"{'SAME' if a == b else 'DIFF'}  {a['question'][:60]!r}\n      in-process: {a}\n      served:     {b}")
    print(
        f"{model}: {same_raw}/{len(local_raw)} LM outputs identical verbatim, {same_norm}/{len(local_raw)} after "
        f"JSON normalization; parsed answers identical: {local_rows == served_rows}; "
        f"in-process {local_s:.1f}s, served {served_s:.1f}s"
    )
    if out is None:
        from experiments.settings import workspace

        out = workspace() / "benchmarks" / "lm_parity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="local/qwen2.5-coder-0.5b")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    main(a.model, a.port, a.out)
