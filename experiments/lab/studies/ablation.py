"""What each lever of SHARP adds, with its cost: policies replayed over one recording of every round.

    python -m experiments.lab.studies.ablation --dataset hotpotqa --split dev --limit 100 \\
        --program program/compiled/sharp-hotpotqa.json --recording workspace/recordings/hotpotqa-dev-100.jsonl \\
        [--json OUT]

The recording (optimize/replay.py, made here where it lacks questions: the program's loop in explore mode, every
repair for each question's form; ``--critic`` also critiques every round) holds what every round read and
answered; each row below is the program with one policy, replayed (the same decisions as a live run, no LM
call): the draft alone (one ranked read: plain RAG over the ranker, with its confidence), then the levers added
one at a time, up to the program's own policy. Each row gives EM, F1, LM calls and recorded seconds per
question, and its EM difference against the draft alone with a paired bootstrap 95% CI.
"""

from __future__ import annotations

import argparse
from typing import Any

from experiments.lab.studies import add_recording_arguments, program_and_records, rounded_diff, show
from optimize import replay
from optimize.stats import paired_bootstrap
from program.sharp.policy import SharpConfig, neutral_policy
from program.sharp.rounds import titles_only

# the draft as the reader wrote it: no repair, no rule of code over its answer
DRAFT = neutral_policy()
NO_REPAIR = {"repair_bridge": (), "repair_comparison": (), "repair_yesno": ()}


def levers(
    program_policy: dict[str, Any], critic: bool, actions: tuple[str, ...] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(name, policy overrides) from the draft alone to the program's policy, one lever at a time: the
    one-call fixes of code (yes/no from P(yes), options and spans as the passage writes them), then each
    repair (the comparison decided in code, the focused read, re-retrieval), then the program's own policy.
    The fixes take the program's own settings (those it was tuned to)."""
    fixes = {k: program_policy[k] for k in ("yes_threshold", "option_form", "force_option", "span_rule")}
    compare = {"repair_comparison": ("compare",), "repair_yesno": ("compare",), "max_repairs": 1,
               "yes_threshold_sub": program_policy["yes_threshold_sub"]}  # fmt: skip
    rows = [
        ("draft only (one ranked read: plain RAG over the ranker)", DRAFT),
        ("+ one-call fixes of code (yes/no from P(yes), options, spans)", {**DRAFT, **fixes}),
        ("+ comparisons decided in code (compare repair)", {**NO_REPAIR, **fixes, **compare}),
        ("+ comparisons composed by the LM instead", {**NO_REPAIR, **fixes, **compare, "compare_by": "composer"}),
        ("+ focused read of flagged bridge drafts", {**NO_REPAIR, **fixes, **compare, "repair_bridge": ("focus",),
                                                     "focus_when": "flagged"}),
        ("+ re-retrieval, every form", {**fixes, **compare, "max_repairs": 2, "repair_bridge": ("focus", "retrieve"),
                                        "repair_comparison": ("compare", "retrieve"),
                                        "repair_yesno": ("compare", "retrieve")}),
        ("the program's policy, answer of the last round", {"choose": "last"}),
        ("the program's policy (shipped)", {}),
    ]  # fmt: skip
    if critic:
        rows.append(("the program's policy, critic on every round", {"ask_critic": "always"}))
        rows.append(("the program's policy, critic in the band below the threshold", {"ask_critic": "band"}))
    if actions is not None:  # a recording of some repairs: the rows that need another are left out
        rows = [
            (name, over)
            for name, over in rows
            if set(SharpConfig.from_mapping({**program_policy, **over}).reachable_repairs()) <= set(actions)
        ]
    # without critiques in the recording, no policy may ask the critic
    return rows if critic else [(name, {**over, "ask_critic": "off"}) for name, over in rows]


def ablate(
    program: Any,
    records: dict,
    examples: list,
    critic: bool,
    seed: int = 0,
    passages: Any = None,
    actions: tuple[str, ...] | None = None,
) -> list[dict]:
    base = program.config
    out, first = [], None
    for name, over in levers(base.model_dump(), critic, actions):
        policy = base.replace(**over)
        result = replay.score(records, examples, policy, seed, passages or titles_only)
        em = {r["id"]: float(r["em"]) for r in result.rows}
        first = first or em
        diff = paired_bootstrap(em, first, seed=seed) if em is not first else None
        m = result.metrics
        out.append(
            {
                "policy": name,
                "em": round(m["em"], 3),
                "f1": round(m["f1"], 3),
                "lm_calls_per_q": round(m["lm_calls_per_q"], 2),
                "seconds_per_q": round(m["live_seconds_per_q"], 1),
                "delta_em": rounded_diff(diff),
                "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in over.items()},
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recording_arguments(ap, split="dev")
    ap.add_argument("--limit", type=int, default=100, help="questions (after --offset)")
    ap.add_argument("--critic", action="store_true", help="record (and ablate) the critic on every round too")
    ap.add_argument(
        "--actions",
        type=lambda text: tuple(a for a in text.split(",") if a),
        default=None,
        help="the repairs to record where the recording lacks them, e.g. compare,focus (default: every one); the "
        "rows that need another repair are left out",
    )
    ap.add_argument("--focus-when", choices=("flagged", "rejected"), default="flagged",
                    help="which drafts get a focused read where one is recorded")  # fmt: skip
    args = ap.parse_args()
    program, examples, records, positions, passages = program_and_records(
        args, args.limit, critique=args.critic, actions=args.actions, focus_when=args.focus_when
    )
    show(
        {
            "questions": len(examples),
            "positions": positions,
            "program": str(args.program),
            "rows": ablate(program, records, examples, args.critic, passages=passages, actions=args.actions),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
