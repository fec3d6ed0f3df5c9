"""The arena report: per-system tables and plots from per-question rows, no LM and no tracking.

``write_report(folder, rows_by_system, baseline)`` writes summary.md (tables), summary.json and
PNG plots (matplotlib, Agg): EM/F1 with CIs, accuracy against cost with the Pareto front, the
per-question-type breakdown and the decision rates of every grader read from the trace steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from optimize.evaluate import aggregate, by_type, cold_figures, imputed_cost, step_sums
from optimize.stats import paired_bootstrap

# Trace-step keys that hold a grader's decision (SHARP critic, CRAG, Self-RAG, Adaptive routes).
# "action" is what a loop did (SHARP: the round's draft or repair, "accepted" its call on the round's P(right);
# Self-RAG: regenerate or stop).
DECISION_KEYS = ("verdict", "action", "grade", "route", "decision", "relevant", "support", "accepted")
COSTS = {
    "lm_calls_per_q": "LM calls / question",
    "tokens_per_q": "tokens / question",
    "seconds_per_q": "seconds / question",
}
JUDGE_KEYS = ("judge_accuracy", "judge_faithfulness")


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the (cost, accuracy) points no other point dominates (cost <= and accuracy >=,
    one strictly), cheapest first."""
    front = []
    for name, (c, a) in points.items():
        dominated = any(c2 <= c and a2 >= a and (c2 < c or a2 > a) for n2, (c2, a2) in points.items() if n2 != name)
        if not dominated:
            front.append(name)
    return sorted(front, key=lambda n: (points[n][0], -points[n][1]))


def decision_rates(rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    """'role.key' -> {value: share} over every trace step carrying a decision key. A decision that
    came from a grader's garbage or a spent budget (the step's problem) counts as '(default)'."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        for step in r.get("trace") or []:
            for key in DECISION_KEYS:
                if key in step and step[key] is not None:
                    value = "(default)" if step.get("problem") or step.get("critic_problem") else str(step[key])
                    bucket = counts.setdefault(f"{step.get('role', '?')}.{key}", {})
                    bucket[value] = bucket.get(value, 0) + 1
    return {label: {v: n / sum(c.values()) for v, n in sorted(c.items())} for label, c in sorted(counts.items())}


def stop_reasons(rows: Sequence[dict]) -> dict[str, float]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.get("stop_reason"))] = counts.get(str(r.get("stop_reason")), 0) + 1
    return {k: v / len(rows) for k, v in sorted(counts.items())} if rows else {}


def column_mean(rows: Sequence[dict], key: str) -> float | None:
    """Mean of a row field over the rows where it is set (judge scores are None when not applicable)."""
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def summarize(rows_by_system: Mapping[str, Sequence[dict]], baseline: str | None, seed: int = 0) -> dict:
    """Metrics, paired differences to the baseline, Pareto fronts, types and decision rates."""
    out: dict[str, Any] = {"baseline": baseline if baseline in rows_by_system else None, "systems": {}}
    pooled = step_sums([r for rows in rows_by_system.values() for r in rows])
    for name, rows in rows_by_system.items():
        m = aggregate(rows, seed)
        # tokens and seconds over the cold questions only (None when every question had a cache hit):
        # a call replayed from DSPy's cache costs ~0 s and no tokens, which would make a system look free
        m.update(cold_figures(rows))
        m.update(imputed_cost(rows, pooled))
        # every question, a cached call costed at its role's uncached mean (the cold-only means are kept
        # in summary.json); unknown when a cached role was never called uncached
        for key in ("prompt_tokens_per_q", "completion_tokens_per_q", "seconds_per_q"):
            m[key] = m[f"imputed_{key}"]
        m["tokens_per_q"] = (
            m["prompt_tokens_per_q"] + m["completion_tokens_per_q"] if m["prompt_tokens_per_q"] is not None else None
        )
        for key in JUDGE_KEYS:
            m[key] = column_mean(rows, key)
        entry = {
            "metrics": m,
            "by_type": by_type(rows, seed),
            "decisions": decision_rates(rows),
            "stop_reasons": stop_reasons(rows),
            "paired": {},
        }
        if out["baseline"] and name != baseline:
            base = {r["id"]: r for r in rows_by_system[baseline]}
            for key in ("em", "f1"):
                entry["paired"][key] = paired_bootstrap(
                    {r["id"]: r[key] for r in rows}, {i: r[key] for i, r in base.items()}, seed=seed
                )
        out["systems"][name] = entry
    # a partial system's F1 is over its first n questions only; on the fronts it stands at the baseline's F1
    # plus its paired difference (the estimate of its F1 on the baseline's questions)
    full = max((e["metrics"]["n"] for e in out["systems"].values()), default=0)
    base = out["systems"].get(out["baseline"]) if out["baseline"] else None
    for e in out["systems"].values():
        m, paired = e["metrics"], e["paired"].get("f1")
        partial = m["n"] < full and base is not None and base["metrics"]["n"] == full and paired
        m["front_f1"] = (base["metrics"]["f1"] + paired["diff"]) if partial else (m["f1"] or 0.0)
    for cost in COSTS:  # a system whose cost is unknown (all cached) is left out of that front
        pts = {
            n: (e["metrics"][cost], e["metrics"]["front_f1"])
            for n, e in out["systems"].items()
            if e["metrics"][cost] is not None
        }
        out.setdefault("pareto", {})[cost] = pareto_front(pts)
    return out


def _f(v: Any, d: int = 3) -> str:
    return "-" if v is None else f"{v:.{d}f}" if isinstance(v, float) else str(v)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.0%}"


def _ci(v: Any) -> str:
    return f"[{v[0]:.3f}, {v[1]:.3f}]" if v else "-"


def _diff(p: dict | None) -> str:
    return "-" if not p else f"{p['diff']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}]"


def markdown(summary: dict, title: str) -> str:
    base = summary["baseline"]
    lines = [
        f"# {title}",
        "",
        f"Baseline for paired differences: **{base or 'none'}** (paired bootstrap, 95% CI, "
        "same questions). Pareto fronts use F1 against each cost (a partial system's F1 there: the "
        "baseline's plus its paired ΔF1).",
        "",
    ]
    lines += _scores_table(summary)
    lines += _table_notes(summary)
    lines += _by_type_table(summary)
    lines += _critic_section(summary)
    lines += _decisions_section(summary)
    if summary.get("skipped"):
        lines += ["", "## Not run", ""] + [f"- **{name}**: {why}" for name, why in summary["skipped"].items()]
    lines += ["", "Plots: scores.png, pareto.png, by_type.png, decisions.png", ""]
    return "\n".join(lines)


def _scores_table(summary: dict) -> list[str]:
    """Markdown lines: the main table, one row per system (scores, paired differences, costs, Pareto marks)."""
    base = summary["baseline"]
    judge = any(e["metrics"].get(k) is not None for e in summary["systems"].values() for k in JUDGE_KEYS)
    head = [
        "system",
        "n",
        "EM",
        "EM 95% CI",
        "F1",
        "F1 95% CI",
        f"ΔEM vs {base}",
        f"ΔF1 vs {base}",
        "calls/q",
        "tokens/q",
        "s/q",
        "cached calls",
        "errors",
        "Pareto (calls/tokens/s)",
    ] + (["judge acc", "faithfulness"] if judge else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, e in summary["systems"].items():
        m = e["metrics"]
        marks = "/".join("*" if name in summary["pareto"][c] else "." for c in COSTS)
        cells = [
            name,
            str(m["n"]),
            _f(m["em"]),
            _ci(m.get("em_ci")),
            _f(m["f1"]),
            _ci(m.get("f1_ci")),
            _diff(e["paired"].get("em")),
            _diff(e["paired"].get("f1")),
            _f(m["lm_calls_per_q"], 2),
            _f(m["tokens_per_q"], 0),
            _f(m["seconds_per_q"], 2),
            _pct(m.get("imputed_share")),
            str(m["errors"]),
            marks,
        ]
        cells += [_f(m.get(k)) for k in JUDGE_KEYS] if judge else []
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _table_notes(summary: dict) -> list[str]:
    """Markdown lines: the notes the main table needs (unequal n; costs imputed for cached calls)."""
    lines: list[str] = []
    if len({e["metrics"]["n"] for e in summary["systems"].values()}) > 1:
        lines += [
            "",
            "Systems have answered different numbers of questions (n): a system with fewer is reported on "
            "the first n of the seeded sample, so its EM/F1 are not over the same questions as the others'. "
            "Compare by ΔEM/ΔF1: they are paired on the questions each system shares with the baseline.",
        ]
    if any(e["metrics"].get("imputed_share") for e in summary["systems"].values()):
        lines += [
            "",
            "Tokens/q and s/q are over every question; a call answered from DSPy's cache (shared with "
            "another system or an earlier run; 'cached calls' is their share) is costed at the mean of the "
            "same system's uncached calls of the same step (of every system's, for a step this system never ran "
            "uncached). '-' means no system ran that step uncached, so the cost is unknown (run with "
            "`--no-cache` to measure it).",
        ]
    return lines


def _by_type_table(summary: dict) -> list[str]:
    """Markdown lines: the section scoring each system by question type (EM / F1 / n)."""
    types = sorted({t for e in summary["systems"].values() for t in e["by_type"]})
    lines = [
        "",
        "## By question type (EM / F1 / n)",
        "",
        "| system | " + " | ".join(types) + " |",
        "|" + "---|" * (len(types) + 1),
    ]
    for name, e in summary["systems"].items():
        cells = [
            f"{_f(bt.get('em'))} / {_f(bt.get('f1'))} / {bt.get('n')}" if (bt := e["by_type"].get(t)) else "-"
            for t in types
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _critic_section(summary: dict) -> list[str]:
    """Markdown lines: the critic calibration section (none where no system has critiques)."""
    table = critic_table(summary)
    if not table:
        return []
    return (
        [
            "",
            "## Critic calibration (every judged round: its P(right) against the label 'the round's answer is an"
            " exact match'; runs of the evidence critic: P(sufficient) against 'every gold paragraph is in the"
            " evidence')",
            "",
        ]
        + table
        + [
            "",
            "Over-trigger: a right answer (complete evidence) sent to a repair; under-trigger: a wrong answer"
            " (incomplete evidence) accepted.",
        ]
    )


def _decisions_section(summary: dict) -> list[str]:
    """Markdown lines: each system's grader decision rates and stop reasons."""
    lines = ["", "## Grader decisions (share of steps; '(default)' = garbage or budget, safe default used)", ""]
    for name, e in summary["systems"].items():
        rates = "; ".join(
            f"{label}: " + ", ".join(f"{v} {s:.0%}" for v, s in vals.items()) for label, vals in e["decisions"].items()
        )
        stops = ", ".join(f"{k} {v:.0%}" for k, v in e["stop_reasons"].items())
        lines.append(f"- **{name}**: {rates or 'no grader steps'}. Stop reasons: {stops or '-'}")
    return lines


def critic_table(summary: dict) -> list[str]:
    """Markdown lines: the critic's calibration for every system with critiques (none: no lines)."""
    critics = {n: e["metrics"] for n, e in summary["systems"].items() if e["metrics"].get("critic_n_critiques")}
    if not critics:
        return []
    lines = [
        "| system | critiques | right calls | Brier | AUROC | over-trigger | under-trigger | sent to a repair |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in critics.items():
        lines.append(
            f"| {name} | {m['critic_n_critiques']} | {_pct(m.get('critic_verdict_accuracy'))} | "
            f"{_f(m.get('critic_brier'))} | {_f(m.get('critic_auroc'), 2)} | "
            f"{_pct(m.get('critic_over_trigger'))} | {_pct(m.get('critic_under_trigger'))} | "
            f"{_pct(m.get('critic_repair_rate'))} |"
        )
    return lines


def write_report(
    folder: str | Path,
    rows_by_system: Mapping[str, Sequence[dict]],
    baseline: str | None = "vanilla",
    title: str = "Arena",
    seed: int = 0,
    skipped: Mapping[str, str] | None = None,
) -> tuple[Path, dict]:
    """Write summary.md, summary.json and the plots into ``folder``; return summary.md's path and the summary.
    ``skipped`` maps a system that was not run to the reason (listed in the report)."""
    from experiments.reports import plots as report_plots

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows_by_system, baseline, seed)
    summary["skipped"] = dict(skipped or {})
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    md = folder / "summary.md"
    md.write_text(markdown(summary, title))
    report_plots.all_plots(summary, folder)
    return md, summary
