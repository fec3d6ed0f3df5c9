"""Compare finished evaluation runs on the questions they share: metrics, cost, paired differences.

    python -m experiments.benchmarks.compare_runs workspace/runs/vanilla-*.jsonl workspace/runs/sharp-*.jsonl

The first file is the baseline. Prints a Markdown table (and --json prints one JSON object).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from optimize.evaluate import aggregate, cold_figures
from optimize.stats import paired_bootstrap

KEYS = [
    "n",
    "em",
    "em_ci",
    "f1",
    "f1_ci",
    "all_gold",
    "recall",
    "lm_calls_per_q",
    "prompt_tokens_per_q",
    "completion_tokens_per_q",
    "seconds_per_q",
    "retries_per_q",
    "cached_share",
    "errors",
    "critic_verdict_accuracy",
    "critic_brier",
    "critic_ece",
    "critic_auroc",
    "critic_over_trigger",
    "critic_under_trigger",
    "critic_insufficient_rate",
    "critic_n_critiques",
]


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(paths: list[Path]) -> dict:
    runs = {p.name.split("-hotpotqa")[0].split("-2wiki")[0] or p.stem: load(p) for p in paths}
    shared = set.intersection(*({r["id"] for r in rows} for rows in runs.values()))
    out = {"shared_questions": len(shared), "systems": {}}
    base_name = next(iter(runs))
    base = {r["id"]: r for r in runs[base_name] if r["id"] in shared}
    for name, rows in runs.items():
        rows = [r for r in rows if r["id"] in shared]
        m = {k: v for k, v in aggregate(rows).items() if k in KEYS}
        m.update(cold_figures(rows))
        if name != base_name:
            for metric in ("em", "f1"):
                d = paired_bootstrap({r["id"]: r[metric] for r in rows}, {i: r[metric] for i, r in base.items()})
                m[f"d_{metric}_vs_{base_name}"] = d
        out["systems"][name] = m
    return out


def markdown(result: dict) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(f"{x:.2f}" for x in v) + "]"
        if isinstance(v, dict):
            return f"{v['diff']:+.3f} [{v['ci'][0]:+.2f}, {v['ci'][1]:+.2f}]"
        return "-" if v is None else str(v)

    names = list(result["systems"])
    keys = list(dict.fromkeys(k for m in result["systems"].values() for k in m))
    lines = [
        f"Questions shared by all runs: {result['shared_questions']}",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(fmt(result["systems"][n].get(k)) for n in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="results JSONL files; the first is the baseline")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = compare(args.results)
    sys.stdout.write((json.dumps(result, default=str) if args.json else markdown(result)) + "\n")


if __name__ == "__main__":
    main()
