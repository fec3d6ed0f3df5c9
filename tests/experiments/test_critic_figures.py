"""The answer critic's pictures when the held-out drafts give no AUROC (all right or all wrong: a small corpus's
held-out questions can): the figures are drawn and say so, the compile does not crash after its work."""

from __future__ import annotations

from experiments.reports.plots import critic_figures


def report(auroc):
    gate = {"auroc": auroc, "auroc_ci": None, "brier": 0.21, "ece": None, "threshold": 0.4,
            "over_trigger": 0.1, "under_trigger": None}  # fmt: skip
    curves = {"roc": [(0.0, 0.0), (0.5, 0.5)], "reliability": [(0.3, 0.0, 4), (0.7, 0.0, 2)]}
    return {"gate": gate, "gate_curves": curves}


def labels(fig):
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_a_report_without_an_auroc_is_drawn_and_says_so():
    figs = critic_figures(report(None))
    assert labels(figs["roc"]) == ["gate: AUROC n/a (one class)"]
    assert labels(figs["reliability"]) == ["gate: Brier 0.210, ECE n/a"]
    assert labels(critic_figures(report(0.8123))["roc"]) == ["gate: AUROC 0.812"]
