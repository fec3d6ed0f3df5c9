"""Rich rendering for the terminal: a prediction's trace, and metric tables. The CLI's only output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def prediction(pred: Any, question: str) -> None:
    console.print(Panel(f"[bold]{pred.answer}[/bold]", title="answer", subtitle=f"system: {pred.system}"))
    console.print(f"[dim]question:[/dim] {question}")
    steps = pred.trace or []
    plan = next((s for s in steps if s.get("role") == "planner"), None)
    if plan is not None:
        console.print("[bold]plan[/bold]: " + (" | ".join(plan.get("sub_queries") or []) or "(planner gave nothing)"))
    table = Table(title="trace", show_lines=False)
    for col in ("#", "role", "k", "detail", "verdict", "P(suff)", "calls", "tokens", "s"):
        table.add_column(col)
    for s in steps:
        role = s.get("role", "?")
        if role == "retriever":
            detail = "; ".join(s.get("queries", []))[:90] + f" -> {len(s.get('new_ids', []))} new"
        elif role == "critic":
            detail = "missing: " + "; ".join(s.get("missing_information") or []) if s.get("missing_information") else ""
            detail += f" next: {s.get('action', '')}"
        else:
            detail = str(
                s.get("answer") or s.get("note") or s.get("route") or s.get("grade") or s.get("decision") or ""
            )
        if s.get("error"):
            detail = f"[red]{s['error'][:80]}[/red] " + detail
        tokens = (s.get("prompt_tokens") or 0) + (s.get("completion_tokens") or 0)
        # the critic's P(sufficient), marked by where it came from: token probabilities or the written words
        p = (
            _fmt(s.get("p_sufficient"), 2) + {"token": " tok", "verbal": " said"}.get(s.get("confidence_source"), "")
            if s.get("p_sufficient") is not None
            else _fmt(s.get("confidence"), 2)
        )
        table.add_row(
            str(s.get("step", "")),
            role,
            _fmt(s.get("k")),
            detail[:120],
            _fmt(s.get("verdict")),
            p,
            _fmt(s.get("lm_calls")),
            str(tokens or ""),
            _fmt(s.get("seconds"), 1),
        )
    console.print(table)
    console.print(
        "[bold]evidence[/bold]: "
        + "; ".join(
            f"[{i}] {p.title}" + (" *" if p.id in (pred.cited_ids or []) else "")
            for i, p in enumerate(pred.passages, 1)
        )
    )
    c = pred.cost or {}
    console.print(
        f"[bold]cost[/bold]: {c.get('lm_calls', 0)} LM calls, {c.get('prompt_tokens', 0)} prompt + "
        f"{c.get('completion_tokens', 0)} completion tokens, {c.get('lm_seconds', 0):.1f} s in the LM, "
        f"{c.get('cached_calls', 0)} from cache; retries {pred.retries}, stop: {pred.stop_reason}"
    )


COLUMNS = [
    ("n", "n"),
    ("em", "EM"),
    ("em_ci", "EM 95% CI"),
    ("f1", "F1"),
    ("f1_ci", "F1 95% CI"),
    ("all_gold", "all-gold"),
    ("lm_calls_per_q", "calls/q"),
    ("prompt_tokens_per_q", "prompt tok/q"),
    ("completion_tokens_per_q", "compl tok/q"),
    ("seconds_per_q", "s/q"),
    ("critic_verdict_accuracy", "critic acc"),
    ("critic_brier", "Brier"),
    ("critic_auroc", "AUROC"),
    ("critic_over_trigger", "over-trig"),
    ("critic_under_trigger", "under-trig"),
    ("cached_share", "cached"),
    ("errors", "errors"),
]


def metrics_table(results: Mapping[str, Mapping[str, Any]], title: str = "evaluation") -> Table:
    """One row per metric, one column per system: readable in an 80-column terminal."""
    table = Table(title=title)
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    for key, head in COLUMNS:
        cells = []
        for m in results.values():
            v = m.get(key)
            cells.append(
                f"[{v[0]:.2f}, {v[1]:.2f}]"
                if isinstance(v, (list, tuple))
                else _fmt(v, 3 if key != "seconds_per_q" else 1)
            )
        table.add_row(head, *cells)
    return table
