"""What code alone makes of the draft (no LM call beyond the ranked read): each one-call fix replayed over
recorded drafts, per question form.

    python -m experiments.lab.studies.one_call_fixes --dataset hotpotqa --split train --offset 0 --n 448 \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

Rows: the draft as the reader wrote it (plain RAG over the ranker, the one-call baseline); a yes/no question
decided from the reader's P("yes") at each threshold of a grid; a chosen option written as its passage writes
it, or forced to the option the answer shares most words with; an answer written as its passage writes it
(the passage's full name, the closest span). Each row: EM and F1 overall and per form, and its EM difference
against the draft with a paired bootstrap 95% CI. Choosing a threshold here is choosing on these questions:
run it on train.
"""

from __future__ import annotations

from typing import Any

from experiments.lab.studies import recording_study, rounded_diff
from optimize import replay
from optimize.policy_search import YES_GRID
from optimize.stats import paired_bootstrap
from program.sharp.policy import neutral_policy

DRAFT = neutral_policy()  # the draft as the reader wrote it


def fixes() -> list[tuple[str, dict[str, Any]]]:
    rows: list[tuple[str, dict[str, Any]]] = [("draft as read", {})]
    rows += [(f"yes/no from P(yes) >= {t}", {"yes_threshold": t}) for t in YES_GRID if t != "off"]
    rows += [
        ("option as its passage writes it", {"option_form": "passage"}),
        ("option forced", {"force_option": True}),
        ("span: passage's name", {"span_rule": "name"}),
        ("span: closest span", {"span_rule": "span"}),
        ("span: name, then closest span", {"span_rule": "both"}),
    ]
    return rows


def by_form(rows: list[dict], forms: dict[str, str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for form in ("bridge", "comparison", "yesno"):
        mine = [r for r in rows if forms.get(r["id"]) == form]
        if mine:
            out[form] = {
                "n": len(mine),
                "em": round(sum(float(r["em"]) for r in mine) / len(mine), 3),
                "f1": round(sum(float(r["f1"]) for r in mine) / len(mine), 3),
            }
    return out


def study(program: Any, records: dict, examples: list, passages: Any, seed: int = 0) -> list[dict]:
    base = program.config.replace(**DRAFT)
    forms = {i: r.get("form") for i, r in records.items()}
    out, first = [], None
    for name, over in fixes():
        result = replay.score(records, examples, base.replace(**over), seed, passages)
        em = {r["id"]: float(r["em"]) for r in result.rows}
        first = first or em
        diff = paired_bootstrap(em, first, seed=seed) if em is not first else None
        out.append(
            {
                "fix": name,
                "em": round(result.metrics["em"], 3),
                "f1": round(result.metrics["f1"], 3),
                "delta_em": rounded_diff(diff),
                "by_form": by_form(result.rows, forms),
            }
        )
    return out


def main() -> None:
    recording_study(
        __doc__,
        "train",
        lambda program, records, examples, passages, seed: {"rows": study(program, records, examples, passages, seed)},
        actions=("draft",),
    )


if __name__ == "__main__":
    main()
