"""Tables read back from finished work, no model and no MLflow: `sharp report arena-table | compare-runs`.

* :func:`arena_table`: the README's arena table from an arena report's summary.json, one row per system
  in the summary's order: n, EM, F1, all-gold, ΔEM against the baseline with its paired 95% CI, LM
  calls, tokens and seconds per question, and the share of calls costed from the cache rule (see
  experiments.reports.summary); :func:`critic_table` the critic-calibration table instead;
  :func:`common_summary` first restricts every system to the questions all of them answered (read from
  the arena's result files), so a stopped arena with partial systems still gives one table over the
  same questions (EM, F1 and CIs recomputed; costs imputed over those rows).
* :func:`compare_runs`: finished evaluation runs (results JSONL files) compared on the questions they
  share: metrics, cost, paired differences against the first; :func:`compare_markdown` renders it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from experiments.reports.summary import critic_table as critic_lines
from experiments.reports.summary import summarize
from optimize.evaluate import aggregate, cold_figures, read_results
from optimize.stats import paired_bootstrap
from program.errors import SharpError


class ReportInputError(SharpError, ValueError):
    """A summary or results file cannot be read, or holds nothing to compare."""


# ---- the arena table -------------------------------------------------------------------------
def _num(v, d=3):
    return "-" if v is None else f"{v:.{d}f}"


def _pct(v):
    return "-" if v is None else f"{v:.0%}"


def _diff(p):
    return "-" if not p else f"{p['diff']:+.2f} [{p['ci'][0]:+.2f}, {p['ci'][1]:+.2f}]"


def read_summary(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"cannot read {path}: {exc}") from None


def arena_table(summary: dict) -> str:
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
    return "\n".join(critic_lines(summary)) or "(no system with critiques)"


def common_summary(summary_path: Path) -> dict:
    """The summary recomputed on the questions every system of ``summary_path`` answered."""
    summary_path = Path(summary_path)
    summary = read_summary(summary_path)
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
        raise ReportInputError(f"no question answered by every system of {summary_path} (results in {results})")
    rows = {name: [r for r in got if r["id"] in shared] for name, got in rows.items()}
    return summarize(rows, summary.get("baseline"))


# ---- comparing evaluation runs ---------------------------------------------------------------
COMPARED_KEYS = [
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
    "critic_repair_rate",
    "critic_n_critiques",
]


def run_name(path: Path) -> str:
    """A results file's system: its name up to the dataset (``vanilla-hotpotqa-dev-….jsonl`` is vanilla)."""
    return path.name.split("-hotpotqa")[0].split("-2wiki")[0].split("-musique")[0] or path.stem


def load_rows(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"cannot read the results file {path}: {exc}") from None


def compare_runs(paths: Sequence[Path]) -> dict:
    """Metrics of each run on the questions every run answered; paired EM/F1 differences against the first."""
    if not paths:
        raise ReportInputError("name at least one results file")
    runs: dict[str, list[dict]] = {}
    for p in paths:
        name = run_name(Path(p))
        if name in runs:  # two runs of one system: keep both, told apart by their file names
            name = Path(p).stem
        runs[name] = load_rows(Path(p))
    shared = set.intersection(*({r["id"] for r in rows} for rows in runs.values()))
    if not shared:
        raise ReportInputError("the runs share no question: " + ", ".join(str(p) for p in paths))
    out: dict = {"shared_questions": len(shared), "baseline": next(iter(runs)), "systems": {}}
    base_name = out["baseline"]
    base = {r["id"]: r for r in runs[base_name] if r["id"] in shared}
    for name, rows in runs.items():
        rows = [r for r in rows if r["id"] in shared]
        m = {k: v for k, v in aggregate(rows).items() if k in COMPARED_KEYS}
        m.update(cold_figures(rows))
        if name != base_name:
            for metric in ("em", "f1"):
                d = paired_bootstrap({r["id"]: r[metric] for r in rows}, {i: r[metric] for i, r in base.items()})
                m[f"d_{metric}_vs_{base_name}"] = d
        out["systems"][name] = m
    return out


def compare_markdown(result: dict) -> str:
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
