"""Score any SHARP policy from a recording of its rounds, without calling the model.

A policy (the accept thresholds, when the critic is asked, which repairs a form gets and how many, the yes/no
thresholds, how a comparison is decided and an answer written, how the answer is selected, the gate and judge
calibrators, the budget) only decides *which recorded rounds a live run would reach and what it answers from
their reads*: it never changes what a round retrieves or reads. So :func:`replay` runs the program's own loop
(:func:`program.sharp.loop.play`) over the rounds of a recording (optimize/recording.py;
:class:`program.sharp.rounds.RecordedRounds` looks them up) to the prediction a live run with that policy returns:
its answer, evidence, trace, stop reason and LM cost (the calls of the rounds it reached, the critic's only
where the policy asks for it). Settings that change what a round reads need a new recording.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import dspy

from optimize.evaluate import EvalResult, aggregate, by_type, error_row
from optimize.metrics import question_row
from program.lm.accounting import Ledger
from program.sharp.loop import conclude, play
from program.sharp.policy import SharpConfig
from program.sharp.rounds import REPAIRS_FOR, PassageLookup, RecordedRounds, ReplayError, Run, titles_only
from program.tracing import Budget, Tracer

__all__ = ["ReplayError", "judged_rounds", "live_seconds", "replay", "score"]


# ---- replay ------------------------------------------------------------------------------------
def replay(rec: dict, policy: SharpConfig, passages: PassageLookup = titles_only) -> dspy.Prediction:
    """The prediction a live run with ``policy`` would have returned, built from ``rec``: the loop
    (program.sharp.loop.play) over the recorded rounds. ``passages`` gives recorded passages their text (rules
    that read it: spans, answer features); without it they have titles only."""
    source = RecordedRounds(rec, passages)
    tr = Tracer(Budget(max_lm_calls=None), Ledger(), observer=None)
    if rec.get("truncated"):  # the note a live trace opens with (program.tracing.traced)
        tr.add("input", note=f"question truncated to {policy.max_question_chars} characters")
    run = play(rec["question"], rec["form"], source, policy, tr)
    return conclude(run, policy, tr, recorded_seconds=round(source.seconds, 4))


class _EveryRound:
    """``policy``'s decisions (how code settles an answer, the critic features where recorded) over every
    recorded round, none accepted early, no gate: the rounds a compile fits the critic on."""

    gate = judge = None
    max_repairs = 2
    focus_when = "rejected"
    choose = "last"
    budget = Budget(max_lm_calls=None)

    def __init__(self, policy: Any, rec: dict):
        self._policy, self._recorded = policy, [r["action"] for r in rec["rounds"] if r["action"] != "draft"]
        self.ask_critic = "always" if rec.get("critiqued") else "off"
        self.critic_floor = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def accept_for(self, form: str) -> float:
        return 2.0

    def repairs_for(self, form: str) -> tuple[str, ...]:
        return tuple(a for a in REPAIRS_FOR[form] if a in self._recorded)


def judged_rounds(rec: dict, policy: Any, passages: PassageLookup = titles_only) -> Run:
    """Every recorded round of ``rec``, settled and featured as ``policy`` settles them (its gate aside), the
    critic's reading attached where the recording has one: what the answer critic is fitted and judged on."""
    source = RecordedRounds(rec, passages)
    tr = Tracer(Budget(max_lm_calls=None), Ledger(), observer=None)
    return play(rec["question"], rec["form"], source, _EveryRound(policy, rec), tr)


def live_seconds(prediction: Any) -> float:
    """What the steps a replayed prediction used took when they ran: its estimated live cost."""
    return float(getattr(prediction, "recorded_seconds", 0.0) or 0.0)


def score(
    records: dict[str, dict],
    examples: Iterable[Any],
    policy: SharpConfig,
    seed: int = 0,
    passages: PassageLookup = titles_only,
    intervals: bool = True,
) -> EvalResult:
    """Rows and aggregate metrics of ``policy`` over ``examples``, as :func:`optimize.evaluate.evaluate`
    would report them for a live run (plus ``live_seconds``: the recorded seconds of the steps used); without
    ``intervals``, the means alone (no bootstrap CI, no per-type table: what a tuning trial needs)."""
    rows = []
    for ex in examples:
        rec = records.get(ex.id)
        if rec is None:
            raise ReplayError(f"question {ex.id} was not recorded")
        if rec.get("error"):
            row = error_row(ex, RuntimeError(rec["error"]))
            row["live_seconds"] = 0.0
        else:
            pred = replay(rec, policy, passages)
            row = question_row(ex, pred)
            row["live_seconds"] = round(live_seconds(pred), 4)
        rows.append(row)
    metrics = aggregate(rows, seed, intervals)
    metrics["live_seconds_per_q"] = sum(r["live_seconds"] for r in rows) / len(rows) if rows else 0.0
    return EvalResult(rows=rows, metrics=metrics, by_type=by_type(rows, seed) if intervals else {})
