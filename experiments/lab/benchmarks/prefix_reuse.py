"""Prompt-prefix reuse on a local model: prompt tokens actually evaluated, with and without reuse.

    python -m experiments.lab.benchmarks.prefix_reuse [--model local/qwen2.5-coder-0.5b] [--n 20]

Part 1: one ``dspy.Predict`` with 4 demos answers N different inputs, (a) evaluating every prompt
from scratch, (b) with prefix reuse. Part 2: two predictors with their own demos interleaved
(as SHARP's planner/critic/generator are): llama.cpp's match on the previous prompt alone
("live") against the session's cached states ("states"). DSPy's response cache is off, so every
call runs the model. Writes WORKSPACE/benchmarks/prefix_reuse.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price-table fetch

import argparse
import json
import logging
import time
from pathlib import Path

import dspy
from dspy.utils.exceptions import AdapterParseError

PEOPLE = [
    "Ada Varga",
    "Bruno Keel",
    "Chen Aldo",
    "Dina Rauh",
    "Emil Stroud",
    "Fay Ocampo",
    "Gus Lindqvist",
    "Hana Mori",
    "Ivo Dragan",
    "Jana Pohl",
    "Kofi Mensah",
    "Lia Ferro",
    "Mats Ekberg",
    "Nora Quist",
    "Omar Haddad",
    "Pia Lutz",
    "Quinn Abara",
    "Rosa Tell",
    "Sven Oja",
    "Tara Bell",
    "Uma Rees",
    "Vik Sato",
    "Wes Orne",
    "Xia Lunde",
]
CITIES = [
    "Lisbon",
    "Tallinn",
    "Osaka",
    "Quito",
    "Accra",
    "Bergen",
    "Cusco",
    "Dakar",
    "Graz",
    "Hue",
    "Izmir",
    "Jaipur",
    "Kraków",
    "Leeds",
    "Malmö",
    "Nantes",
    "Oulu",
    "Porto",
    "Riga",
    "Split",
    "Tartu",
    "Umeå",
    "Varna",
    "Zadar",
]
JOBS = ["glassblower", "cartographer", "luthier", "beekeeper", "typesetter", "ferry pilot"]


def _context(i: int) -> str:
    p, c, j = PEOPLE[i % len(PEOPLE)], CITIES[(i * 7) % len(CITIES)], JOBS[i % len(JOBS)]
    return (
        f"{p} was born in {c} in {1900 + 3 * i}. {p} worked as a {j} for most of a long life and "
        f"later taught the craft to apprentices in {CITIES[(i * 5 + 3) % len(CITIES)]}. "
        f"A street in {c} is named after {p}."
    )


class AnswerFromContext(dspy.Signature):
    """Answer the question using only the context. Reply with a short phrase, not a sentence."""

    context: str = dspy.InputField(desc="facts that may contain the answer")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words")


class JudgeSupport(dspy.Signature):
    """Decide whether the context states the claim. Reply yes or no."""

    context: str = dspy.InputField(desc="facts")
    claim: str = dspy.InputField()
    supported: str = dspy.OutputField(desc="yes or no")


def _qa(i: int) -> dspy.Example:
    return dspy.Example(
        context=_context(i), question=f"Where was {PEOPLE[i % len(PEOPLE)]} born?", answer=CITIES[(i * 7) % len(CITIES)]
    ).with_inputs("context", "question")


def _claim(i: int) -> dspy.Example:
    p, j = PEOPLE[i % len(PEOPLE)], JOBS[(i + i % 2) % len(JOBS)]
    return dspy.Example(
        context=_context(i), claim=f"{p} worked as a {j}.", supported="yes" if i % 2 == 0 else "no"
    ).with_inputs("context", "claim")


def _predictors(demos: int = 4) -> tuple[dspy.Predict, dspy.Predict]:
    """The two predictors SHARP's roles stand for, each with ``demos`` demos (the shared prefix a reuse skips)."""
    qa, judge = dspy.Predict(AnswerFromContext), dspy.Predict(JudgeSupport)
    qa.demos = [_qa(i) for i in range(100, 100 + demos)]
    judge.demos = [_claim(i) for i in range(200, 200 + demos)]
    return qa, judge


def local_lm(model: str, mode: str, **spec: object):
    """A generator LM on the local ``model`` with prefix reuse ``mode`` (off, live, states), DSPy's cache off."""
    from program.lm import LMSpec, SharpLM
    from program.lm.local import LocalEngine

    lm_spec = LMSpec(**{"model": model, "cache": False, "max_tokens": 48, **spec})
    return SharpLM(lm_spec, "generator", engine=LocalEngine.for_spec(lm_spec, prefix_reuse=mode))


def single_calls(n: int) -> list[tuple[dspy.Predict, dict]]:
    """Part 1's calls: one Predict with 4 demos over ``n`` different inputs."""
    qa, _ = _predictors()
    return [(qa, _qa(i).inputs().toDict()) for i in range(n)]


def run_calls(lm, mode: str, calls: list[tuple[dspy.Predict, dict]]) -> dict:
    """Run ``calls`` on ``lm`` (its session's cached prefixes cleared first): wall time, prompt tokens
    evaluated and reused, and every output."""
    from program.lm import recording

    lm.engine.session.clear_states()
    rows, t0 = [], time.perf_counter()
    with recording() as ledger:
        for pred, inputs in calls:
            t = time.perf_counter()
            try:
                output = dict(pred(lm=lm, **inputs).toDict())
            except AdapterParseError as exc:  # a weak model broke the format: the call still ran and is timed
                output = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            rows.append({"seconds": round(time.perf_counter() - t, 3), "output": output})
    wall = time.perf_counter() - t0
    for row, rec in zip(rows, ledger.records):
        row.update(
            prompt_tokens=rec.prompt_tokens,
            reused=rec.reused_prompt_tokens,
            evaluated=rec.prompt_tokens - rec.reused_prompt_tokens,
            completion_tokens=rec.completion_tokens,
        )
    s = ledger.summary()
    return {
        "mode": mode,
        "calls": len(rows),
        "wall_s": round(wall, 3),
        "prompt_tokens": s["prompt_tokens"],
        "evaluated_tokens": s["prompt_tokens"] - s["reused_prompt_tokens"],
        "reused_tokens": s["reused_prompt_tokens"],
        "rows": rows,
    }


def compare(a: dict, b: dict) -> dict:
    same = sum(x["output"] == y["output"] for x, y in zip(a["rows"], b["rows"]))
    return {
        "evaluated_fewer_pct": round(100 * (1 - b["evaluated_tokens"] / max(a["evaluated_tokens"], 1)), 1),
        "wall_ratio": round(b["wall_s"] / a["wall_s"], 3),
        "same_outputs": f"{same}/{len(a['rows'])}",
    }


def _line(r: dict) -> str:
    per = r["evaluated_tokens"] / r["calls"]
    return (
        f"  {r['mode']:6s} calls {r['calls']:3d}  prompt tok {r['prompt_tokens']:6d}  evaluated {r['evaluated_tokens']:6d} "
        f"({per:6.1f}/call)  reused {r['reused_tokens']:6d}  wall {r['wall_s']:6.1f}s"
    )


def main(model: str = "local/qwen2.5-coder-0.5b", n: int = 20, n_interleaved: int = 6, out: Path | None = None) -> dict:
    qa, judge = _predictors()
    single = single_calls(n)
    result: dict = {"model": model, "single": {}, "interleaved": {}}
    print(f"{model}: one Predict with 4 demos, {n} inputs")
    for mode in ("off", "states"):
        result["single"][mode] = r = run_calls(local_lm(model, mode), mode, single)
        print(_line(r), flush=True)
    result["single"]["comparison"] = c = compare(result["single"]["off"], result["single"]["states"])
    print(
        f"  -> {c['evaluated_fewer_pct']}% fewer prompt tokens evaluated, wall-time ratio {c['wall_ratio']}, "
        f"same outputs {c['same_outputs']}"
    )
    if n_interleaved:
        mixed = [
            call
            for i in range(n_interleaved)
            for call in ((qa, _qa(50 + i).inputs().toDict()), (judge, _claim(50 + i).inputs().toDict()))
        ]
        print(f"two predictors interleaved, {len(mixed)} calls")
        for mode in ("live", "states"):
            result["interleaved"][mode] = r = run_calls(local_lm(model, mode), mode, mixed)
            print(_line(r), flush=True)
        result["interleaved"]["comparison"] = c = compare(
            result["interleaved"]["live"], result["interleaved"]["states"]
        )
        print(
            f"  -> {c['evaluated_fewer_pct']}% fewer prompt tokens evaluated than 'live', wall-time ratio "
            f"{c['wall_ratio']}, same outputs {c['same_outputs']}"
        )
    if out is None:
        from experiments.settings import workspace

        out = workspace() / "benchmarks" / "prefix_reuse.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="local/qwen2.5-coder-0.5b")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--interleaved", type=int, default=6, help="inputs per predictor in part 2 (0: skip)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    main(a.model, a.n, a.interleaved, a.out)
