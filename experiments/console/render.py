"""Rich rendering for the terminal: a prediction's trace, and metric tables. The CLI's only output."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from experiments.console.terminal import console, duration, err_console


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


# why a loop stopped, as a person reads it (program/sharp/loop.py next_step)
STOPS = {
    "confident": "P(right) reached the threshold",
    "max_repairs": "the repair cap",
    "no_repair_for_form": "no repair for this form",
    "no_repair_left": "every repair tried",
}


def stop_text(reason: Any) -> str:
    """A stop reason in words ("budget_lm_calls" -> "budget spent: lm calls"); an unknown one as it is."""
    reason = str(reason)
    if reason.startswith("budget_"):
        return "budget spent: " + reason.removeprefix("budget_").replace("_", " ")
    return STOPS.get(reason, reason)


def confidence_line(steps: Sequence[Mapping[str, Any]]) -> str | None:
    """The chosen answer's P(right) for the answer panel, marked low where it is below the program's threshold
    for the question's form (where the form has no repair, its threshold decided nothing: below one half)."""
    chosen = next((s for s in reversed(steps) if s.get("role") == "select"), None)
    if chosen is None or chosen.get("p_right") is None:
        return None
    p = float(chosen["p_right"])
    repairable = chosen.get("repairable", True)
    bar = float(chosen["threshold"]) if repairable and chosen.get("threshold") is not None else 0.5
    text = f"P(right) {p:.2f}"
    if p < bar:
        what = f"below the threshold {bar:.2f}" if repairable and chosen.get("threshold") is not None else "below 0.5"
        text = f"[yellow]{text}: low ({what})[/yellow]"
    return text


def prediction(pred: Any, question: str) -> None:
    steps = pred.trace or []
    sure = confidence_line(steps)
    subtitle = f"system: {pred.system}" + (f" · {sure}" if sure else "")
    console.print(Panel(f"[bold]{pred.answer}[/bold]", title="answer", subtitle=subtitle))
    console.print(f"[dim]question:[/dim] {question}")
    plan = next((s for s in steps if s.get("role") == "planner" and "hops" not in s), None)
    if plan is not None:
        console.print(
            "[bold]sub-questions[/bold]: " + (" | ".join(plan.get("sub_questions") or []) or "(planner gave nothing)")
        )
    console.print(_trace_table(steps))
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
        f"{c.get('cached_calls', 0)} from cache; retries {pred.retries}, stop: {stop_text(pred.stop_reason)}"
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


def ranker_table(summary: Mapping[str, Any]) -> Table:
    """`sharp fit-ranker`: all-gold@k and recall@k of each ranking, one column per question set."""
    scores = summary["scores"]
    table = Table(title=f"evidence ranker {summary['name']!r}")
    table.add_column("metric")
    labels = {"train": "train (fitted)", "held_out": "held out: ranker", "held_out_hybrid": "held out: hybrid"}
    for key in scores:
        table.add_column(f"{labels.get(key, key)} (n={scores[key]['questions']})", justify="right")
    for metric in [m for m in next(iter(scores.values())) if m != "questions"]:
        table.add_row(metric, *(_fmt(s[metric]) for s in scores.values()))
    return table


# ---- `sharp ask`: each step as it happens (program.tracing observer) -------------------------------------
ROLE_NAMES = {"planner": "planning", "critic": "the critic", "composer": "composing", "generator": "answering"}


def _seconds(step: Mapping[str, Any]) -> str:
    if not step.get("lm_calls") and step.get("seconds") is None:
        return ""
    tokens = (step.get("prompt_tokens") or 0) + (step.get("completion_tokens") or 0)
    cached = " cached" if step.get("cached_calls") else ""
    return f" [dim]({_fmt(step.get('seconds'), 1)} s, {tokens} tokens{cached})[/dim]"


def _p(step: Mapping[str, Any], key: str, name: str) -> str:
    p = step.get(key)
    return f"{name} -" if p is None else f"{name} {p:.2f}"


# the trace table's columns: (header, right-aligned). A column blank on every row is left out, and the detail
# takes the width the others leave (they never wrap): a trace reads in an 80-column terminal
TRACE_COLUMNS = (
    ("#", True),
    ("role", False),
    ("k", True),
    ("detail", False),
    ("verdict", False),
    ("P", True),
    ("calls", True),
    ("tok", True),
    ("s", True),
)


def _trace_table(steps: list[dict]) -> Table:
    """The trace as a table: one row per step (#, role, k, detail, verdict, P, calls, tokens, seconds)."""
    rows = [_trace_row(s) for s in steps]
    keep = [i for i, (head, _) in enumerate(TRACE_COLUMNS) if head == "detail" or any(row[i] for row in rows)]
    table = Table(title="trace", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i in keep:
        head, right = TRACE_COLUMNS[i]
        if head == "detail":
            table.add_column(head, ratio=1, overflow="fold")
        else:
            table.add_column(head, justify="right" if right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _trace_row(s: Mapping[str, Any]) -> tuple[str, ...]:
    """A step's cells, in the order of :data:`TRACE_COLUMNS` (blank where the step has no such value)."""

    def cell(key: str, digits: int = 3) -> str:
        return "" if s.get(key) is None else _fmt(s[key], digits)

    tokens = (s.get("prompt_tokens") or 0) + (s.get("completion_tokens") or 0)
    return (
        cell("step"),
        str(s.get("role", "?")),
        cell("k"),
        _trace_detail(s),
        cell("verdict"),
        cell("p_supported", 2) or cell("p_right", 2),  # the critic's P(supported), a judgement's P(right)
        cell("lm_calls"),
        str(tokens or ""),
        cell("seconds", 1),
    )


# where the critic's P(supported) came from (program.sharp.critic.read_critique)
CRITIC_SOURCES = {"token": "P(supported), its tokens", "verbal": "P(supported), as written"}


def _trace_detail(s: Mapping[str, Any]) -> str:
    """A trace row's detail (Rich markup): a retrieval's queries, the planner's sub-questions, where the
    critic's P came from, a judgement's call, else the step's answer or decision; an error first."""
    role = s.get("role", "?")
    if role == "retriever":
        detail = escape(_cut("; ".join(s.get("queries", [])), 160)) + f" -> {len(s.get('new_ids', []))} new"
    elif role == "planner" and "hops" in s:  # a chain's plan
        detail = escape(_cut(" -> ".join(s.get("hops") or []), 160)) or "(no hop)"
        if s.get("refused"):
            detail += f" [yellow](refused: {escape(str(s['refused']))})[/yellow]"
    elif role == "planner":
        detail = escape(_cut(" | ".join(s.get("sub_questions") or []), 160)) or "(no sub-question)"
    elif role == "critic":  # the draft it read is the round's answer, on the rows above
        detail = CRITIC_SOURCES.get(s.get("confidence_source"), "")
        if s.get("critic_problem"):
            detail = f"[yellow]discarded: {escape(str(s['critic_problem']))}[/yellow]"
    elif role == "judgement":  # its answer is the round's, on the row above
        detail = f"{s.get('action')}: " + (
            "no repair for this form"
            if s.get("repairable") is False
            else "accepted"
            if s.get("accepted")
            else "not accepted"
        )
        if s.get("how") not in (None, "read"):  # code settled the answer: how, and why
            detail += f"; {escape(str(s['how']))}" + (f" ({escape(_cut(str(s['why']), 80))})" if s.get("why") else "")
        if s.get("fallback"):
            detail += f" [yellow]({escape(str(s['fallback']))})[/yellow]"
    else:
        detail = escape(
            str(s.get("answer") or s.get("note") or s.get("route") or s.get("grade") or s.get("decision") or "")
        )
    if s.get("error"):
        detail = f"[red]{escape(s['error'][:80])}[/red] " + detail
    return detail


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word, marked with an ellipsis."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _retrieval_line(step: Mapping[str, Any], rnd: str) -> str:
    """step_line of a retrieval: its k, how many queries, passages and new ones (and the queries, dimmed)."""
    queries = step.get("queries") or []
    hits = sum(len(ids) for ids in step.get("retrieved_ids") or [])
    return (
        f"[bold]retrieve[/bold]{rnd}, k={_fmt(step.get('k'))}: {len(queries)} "
        f"quer{'y' if len(queries) == 1 else 'ies'} -> {hits} passages, {len(step.get('new_ids') or [])} new"
        + (f" [dim]({escape('; '.join(queries))[:160]})[/dim]" if queries else "")
    )


def _critic_line(step: Mapping[str, Any], rnd: str) -> str:
    """step_line of a critique: its verdict and P(supported), and a discarded critique's problem."""
    text = f"[bold]critic[/bold]{rnd}: {escape(str(step.get('verdict') or '-'))}, {_p(step, 'p_supported', 'P(supported)')}"
    if step.get("critic_problem"):
        text += f" [yellow](discarded: {escape(str(step['critic_problem']))})[/yellow]"
    return text


def _chain_plan_line(step: Mapping[str, Any], rnd: str) -> str:
    hops = step.get("hops") or []
    by = "by rule" if step.get("by_rule") else "by the planner"
    text = f"[bold]chain[/bold]{rnd} ({by}): " + (" -> ".join(escape(h) for h in hops) or "(no hop)")
    if step.get("refused"):
        text += f" [yellow](refused: {escape(str(step['refused']))}: the draft stands)[/yellow]"
    return text


def step_line(step: Mapping[str, Any]) -> str:
    """One line (Rich markup) saying what a step did: the planner's sub-questions, a retrieval's k and how
    many passages were new, an answer, the critic's verdict and P(supported), the judgement of a round
    (P(right), accepted or not), the composed answer."""
    role = str(step.get("role", "?"))
    rnd = f", round {step['round']}" if step.get("round") is not None else ""
    if role == "planner" and "hops" in step:  # a chain's plan, by rule or by the planner LM
        text = _chain_plan_line(step, rnd)
    elif role == "planner":
        subs = step.get("sub_questions") or []
        text = f"[bold]compare[/bold]{rnd}: " + (
            " | ".join(escape(s) for s in subs) if subs else "(no sub-question: the draft stands)"
        )
    elif role in ("retriever", "fallback"):
        text = _retrieval_line(step, rnd)
    elif role == "critic":
        text = _critic_line(step, rnd)
    elif role == "judgement":
        verdict = (
            "no repair for this form"
            if step.get("repairable") is False
            else "accepted"
            if step.get("accepted")
            else "not accepted"
        )
        text = (
            f"[bold]judge[/bold]{rnd} ({escape(str(step.get('action')))}): {_p(step, 'p_right', 'P(right)')}, {verdict}"
        )
        if step.get("how") not in (None, "read"):
            text += f"; {escape(str(step['how']))}" + (
                f" [dim]({escape(str(step['why']))})[/dim]" if step.get("why") else ""
            )
        if step.get("fallback"):
            text += f" [yellow]({escape(str(step['fallback']))})[/yellow]"
    elif role == "composer":
        text = f"[bold]compose[/bold]{rnd}: {escape(str(step.get('answer') or ''))}"
    elif role == "select":
        text = f"[bold]answer[/bold] from round {step.get('round')} ({escape(str(step.get('action')))}): " + escape(
            str(step.get("answer") or "")
        )
    elif role in ("generator", "focuser"):
        cited = len(step.get("cited_ids") or [])
        text = f"[bold]answer[/bold]: {escape(str(step.get('answer') or ''))}" + (
            f" [dim](cites {cited} passage{'s' if cited != 1 else ''})[/dim]" if cited else ""
        )
    else:
        detail = step.get("note") or step.get("route") or step.get("grade") or step.get("decision") or ""
        text = f"[bold]{escape(role)}[/bold]{rnd}" + (f": {escape(str(detail))}" if detail else "")
    if step.get("error"):
        first = " ".join(str(step["error"]).split())
        first = first.split(". ")[0][:100]
        text += f" [red]failed: {escape(first)}[/red]"
    return text + _seconds(step)


@contextmanager
def live_steps(enabled: bool = True, console: Console | None = None) -> Iterator[None]:
    """Show each step of the questions answered in the block as it happens, on stderr: a line per step,
    and in a terminal a spinner saying what runs now. Off (``enabled`` False) for ``--json``."""
    if not enabled:
        yield
        return
    from program.tracing import observing

    out = console or err_console
    t0 = time.monotonic()

    def on_step(step: dict) -> None:
        out.print(step_line(step), highlight=False, soft_wrap=True)

    if not out.is_terminal:
        with observing(on_step):
            yield
        return
    now = _Now("starting", t0)
    with out.status(now):

        def on_start(role: str, inputs: dict) -> None:
            now.what = f"{ROLE_NAMES.get(role, role)}: waiting for the model"

        def on_done(step: dict) -> None:
            on_step(step)
            now.what = "working"

        with observing(on_done, on_start):
            yield


class _Now:
    """The spinner's text: what runs now and the seconds since the question started, recomputed each
    time the spinner is drawn (so the clock moves while a model thinks)."""

    def __init__(self, what: str, t0: float):
        self.what, self.t0 = what, t0

    def __rich__(self) -> str:
        return f"{self.what}... [dim]({duration(time.monotonic() - self.t0)} into the question)[/dim]"


# ---- `sharp demo` ----------------------------------------------------------------------------------------
def _s(n: int) -> str:
    return "" if n == 1 else "s"


def index_heads_up(dataset: str, index_dir: Any) -> None:
    err_console.print(
        f"[bold]building the {escape(dataset)} index[/bold] in {escape(str(index_dir))} (once): every passage of "
        "the corpus is embedded; the bar shows the count and the ETA at the speed measured (a stopped build "
        "resumes)",
        highlight=False,
        soft_wrap=True,
    )


def demo_plan(n: int, dataset: str, split: str) -> None:
    """What the demo will do. No time is promised before one is measured: each ETA below comes from the
    speed measured in this run (SHARP's, until its first answer, from plain RAG's seconds per LM call)."""
    text = (
        f"[bold]plain RAG, then SHARP[/bold], on {n} seeded {escape(dataset)} {escape(split)} question{_s(n)}: "
        "each ETA comes from the speed measured as questions finish"
    )
    err_console.print(text, highlight=False, soft_wrap=True)


HEADLINE = [
    ("em", "EM"),
    ("f1", "F1"),
    ("all_gold", "all-gold"),
    ("lm_calls_per_q", "calls/q"),
    ("seconds_per_q", "s/q"),
]


def system_done(label: str, metrics: Mapping[str, Any], results: Any = None) -> None:
    """One system's headline, printed as soon as it finishes."""
    table = Table(title=f"{label}: {metrics.get('n', 0)} questions", title_justify="left")
    for _, head in HEADLINE:
        table.add_column(head, justify="right")
    table.add_row(*(_fmt(metrics.get(key), 1 if key == "seconds_per_q" else 3) for key, _ in HEADLINE))
    console.print(table)
    if metrics.get("errors"):
        console.print(f"[red]{metrics['errors']} question(s) failed[/red] (see the end)")


def demo_end(
    results: Mapping[str, Mapping[str, Any]],
    title: str,
    n: int,
    larger: int,
    larger_seconds: float | None,
    mlflow_uri: str,
    traces: bool,
    log_file: Any = None,
) -> None:
    console.print(metrics_table(results, title))
    if n < larger:
        eta = f": about {duration(larger_seconds)} here at the speeds just measured" if larger_seconds else ""
        console.print(
            f"A first look on {n} question{_s(n)}: the 95% CIs are wide. For a real comparison run it larger{eta} "
            f"(the {n} answered now come back from the LM cache):\n"
            f"  make run LIMIT={larger}    (or: sharp demo --limit {larger})",
            highlight=False,
        )
    console.print(
        f"MLflow: `make mlflow-ui` (or: sharp mlflow-ui --tracking-uri {mlflow_uri}) then open http://127.0.0.1:5000"
        + (": runs, metrics, and a trace per question (Traces tab)" if traces else ""),
        highlight=False,
        soft_wrap=True,
    )
    if log_file:
        console.print(f"[dim]full log: {log_file}[/dim]", highlight=False, soft_wrap=True)
