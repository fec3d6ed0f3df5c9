"""The arena's PNG plots (matplotlib, Agg backend) from a report summary (experiments.reports.summary)."""

from __future__ import annotations

from pathlib import Path

COST_LABELS = {
    "lm_calls_per_q": "LM calls / question",
    "tokens_per_q": "tokens / question",
    "seconds_per_q": "seconds / question",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scores(summary: dict, path: Path) -> None:
    plt = _plt()
    names = list(summary["systems"])
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names) + 2), 4))
    width = 0.38
    for j, key in enumerate(("em", "f1")):
        vals, errs = [], [[], []]
        for n in names:
            m = summary["systems"][n]["metrics"]
            v, ci = m.get(key) or 0.0, m.get(f"{key}_ci")
            vals.append(v)
            errs[0].append(v - ci[0] if ci else 0.0)
            errs[1].append(ci[1] - v if ci else 0.0)
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        ax.bar(xs, vals, width, yerr=errs, capsize=3, label=key.upper())
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("score (95% bootstrap CI)")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("EM and F1 per system")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pareto(summary: dict, path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, len(COST_LABELS), figsize=(5 * len(COST_LABELS), 4))
    for ax, (cost, label) in zip(axes, COST_LABELS.items()):
        front = summary["pareto"][cost]
        for n, e in summary["systems"].items():
            if e["metrics"][cost] is None:  # cost unknown (every answer from the cache): not plotted
                continue
            x, y = e["metrics"][cost], e["metrics"]["front_f1"]  # what the front was computed on
            on = n in front
            ax.scatter([x], [y], s=70 if on else 35, c="tab:red" if on else "tab:blue", zorder=3)
            ax.annotate(n, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        pts = [
            (summary["systems"][n]["metrics"][cost] or 0.0, summary["systems"][n]["metrics"]["front_f1"]) for n in front
        ]
        if len(pts) > 1:
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", c="tab:red", lw=1, label="Pareto front")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("F1")
        ax.grid(alpha=0.3)
    unknown = [n for n, e in summary["systems"].items() if any(e["metrics"][c] is None for c in COST_LABELS)]
    fig.suptitle(
        "Accuracy against cost (red: Pareto-optimal)"
        + (f"; cost unknown, all cached: {', '.join(unknown)}" if unknown else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def by_type(summary: dict, path: Path) -> None:
    plt = _plt()
    names = list(summary["systems"])
    types = sorted({t for e in summary["systems"].values() for t in e["by_type"]})
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2 * len(types) + 4), 4))
    width = 0.8 / max(1, len(names))
    for ax, key in zip(axes, ("em", "f1")):
        for j, n in enumerate(names):
            bt = summary["systems"][n]["by_type"]
            vals = [(bt.get(t) or {}).get(key) or 0.0 for t in types]
            ax.bar([i + (j - (len(names) - 1) / 2) * width for i in range(len(types))], vals, width, label=n)
        ax.set_xticks(range(len(types)), types)
        ax.set_ylim(0, 1)
        ax.set_title(f"{key.upper()} by question type")
    axes[1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def decisions(summary: dict, path: Path) -> None:
    plt = _plt()
    bars = [(f"{n}: {label}", vals) for n, e in summary["systems"].items() for label, vals in e["decisions"].items()]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.4 * len(bars) + 1.5)))
    if not bars:
        ax.text(0.5, 0.5, "no grader steps in these traces", ha="center", va="center")
        ax.axis("off")
    colors = {}
    palette = plt.get_cmap("tab20").colors
    for i, (_label, vals) in enumerate(bars):
        left = 0.0
        for value, share in vals.items():
            c = colors.setdefault(value, palette[len(colors) % len(palette)])
            ax.barh(i, share, left=left, color=c, edgecolor="white")
            if share >= 0.08:
                ax.text(left + share / 2, i, value, ha="center", va="center", fontsize=7)
            left += share
    if bars:
        ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
        ax.set_xlim(0, 1)
        ax.invert_yaxis()
        ax.set_xlabel("share of the grader's decisions")
        ax.set_title("Grader decision rates")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def all_plots(summary: dict, folder: Path) -> list[Path]:
    out = []
    for name, fn in (("scores", scores), ("pareto", pareto), ("by_type", by_type), ("decisions", decisions)):
        p = folder / f"{name}.png"
        fn(summary, p)
        out.append(p)
    return out


def critic_figures(report: dict) -> dict:
    """The answer critic's pictures from its compile report (optimize.gate_fitting.fit_answer_critic): the ROC curve
    and the reliability diagram of the gate (and of the judge, where fitted) on the held-out drafts, with the
    AUROC, Brier and the over- and under-trigger rates at the threshold in the titles. Returns name -> figure."""
    plt = _plt()
    figs = {}
    views = [(name, report.get(name), report.get(f"{name}_curves")) for name in ("gate", "judge")]
    views = [(n, m, c) for n, m, c in views if m and c]
    if not views:
        return figs
    fig, ax = plt.subplots(figsize=(5, 5))
    for name, metrics, curves in views:
        xs, ys = zip(*curves["roc"], (1.0, 1.0))
        lo, hi = metrics.get("auroc_ci") or (None, None)
        ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""
        # no AUROC where the held-out drafts are all right or all wrong: said in the legend, not a crash
        auroc = f"{metrics['auroc']:.3f}{ci}" if metrics.get("auroc") is not None else "n/a (one class)"
        ax.plot(xs, ys, marker=".", label=f"{name}: AUROC {auroc}")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
    ax.set(xlabel="false positive rate (wrong drafts accepted)", ylabel="true positive rate (right drafts accepted)")
    ax.set_title("answer critic ROC, held-out drafts")
    ax.legend(loc="lower right", fontsize=8)
    figs["roc"] = fig
    fig, ax = plt.subplots(figsize=(5, 5))
    for name, metrics, curves in views:
        if curves["reliability"]:
            conf, acc, n = zip(*curves["reliability"])
            brier, ece = (f"{metrics[k]:.3f}" if metrics.get(k) is not None else "n/a" for k in ("brier", "ece"))
            ax.plot(conf, acc, marker="o", label=f"{name}: Brier {brier}, ECE {ece}")
            for c, a, k in zip(conf, acc, n):
                ax.annotate(str(k), (c, a), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
    gate = report.get("gate") or {}
    ax.set_title(
        f"reliability (threshold {gate.get('threshold', 0):.2f}: over-trigger "
        f"{_pct(gate.get('over_trigger'))}, under-trigger {_pct(gate.get('under_trigger'))})",
        fontsize=9,
    )
    ax.set(xlabel="P(right), binned", ylabel="share right", xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left", fontsize=8)
    figs["reliability"] = fig
    return figs


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"
