"""The README's arena table from an arena report's summary.json (no model, no MLflow).

    python -m experiments.benchmarks.arena_table workspace/reports/arena-hotpotqa-dev-100-s0/summary.json

One row per system, in the summary's order: n, EM, F1, all-gold, ΔEM against the baseline with its
paired 95% CI, LM calls, tokens and seconds per question, and the share of calls costed from the
cache rule (see experiments.report). ``--critic`` prints the critic-calibration table instead.
``--common`` first restricts every system to the questions all of them answered (read from the
arena's result files), so a stopped arena with partial systems still gives one table over the same
questions (EM, F1 and CIs recomputed; costs imputed over those rows).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _num(v, d=3):
    return "-" if v is None else f"{v:.{d}f}"


def _pct(v):
    return "-" if v is None else f"{v:.0%}"


def _diff(p):
    return "-" if not p else f"{p['diff']:+.2f} [{p['ci'][0]:+.2f}, {p['ci'][1]:+.2f}]"


def table(summary: dict) -> str:
    base = summary.get("baseline") or "none"
    lines = [
        f"| system | n | EM | F1 | all-gold | ΔEM vs {base} [95% CI] | LM calls/q | tokens/q | s/q | cached |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in summary["systems"].items():
        m = e["metrics"]
        tokens = "-" if m.get("tokens_per_q") is None else f"{m['tokens_per_q']:,.0f}"
        lines.append(
            f"| {name} | {m['n']} | {_num(m['em'], 2)} | {_num(m['f1'])} | {_num(m.get('all_gold'), 2)} | "
            f"{_diff(e['paired'].get('em'))} | {_num(m['lm_calls_per_q'], 2)} | {tokens} | "
            f"{_num(m.get('seconds_per_q'), 1)} | {_pct(m.get('imputed_share'))} |"
        )
    return "\n".join(lines)


def critic_table(summary: dict) -> str:
    from experiments.report import critic_table as lines

    return "\n".join(lines(summary)) or "(no system with critiques)"


def common_summary(summary_path: Path) -> dict:
    """The summary recomputed on the questions every system of ``summary_path`` answered."""
    from experiments.report import summarize
    from optimize.evaluate import read_results

    summary = json.loads(summary_path.read_text())
    results = summary_path.parent / "results"
    if not results.is_dir():  # a report written into a subfolder (--report NAME)
        results = summary_path.parent.parent / "results"
    rows = {}
    for name in summary["systems"]:
        path = results / f"{name}.jsonl"
        # one row per question, the last written (as a resumed evaluation keeps it), in file order
        rows[name] = (
            list({r["id"]: r for r in read_results(path) if isinstance(r, dict)}.values()) if path.exists() else []
        )
    shared = set.intersection(*({r["id"] for r in got} for got in rows.values())) if rows else set()
    if not shared:
        raise SystemExit(f"no question answered by every system of {summary_path}")
    rows = {name: [r for r in got if r["id"] in shared] for name, got in rows.items()}
    return summarize(rows, summary.get("baseline"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary", type=Path, help="summary.json of an arena report")
    ap.add_argument("--critic", action="store_true", help="the critic-calibration table instead")
    ap.add_argument("--common", action="store_true", help="only the questions every system answered")
    args = ap.parse_args(argv)
    try:
        summary = common_summary(args.summary) if args.common else json.loads(args.summary.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        ap.error(f"cannot read {args.summary}: {exc}")
    sys.stdout.write((critic_table(summary) if args.critic else table(summary)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
