"""A compiled program's answer critic and policy on recorded questions it was neither fitted nor tuned on.

    python -m experiments.lab.studies.heldout_critic --dataset hotpotqa --split train --offset 477 --n 100 \\
        --program program/compiled/sharp-hotpotqa.json \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

Read from the recording only (no LM call; a question the recording lacks is an error). Reports:

- the gate's calibrated P(right) on every recorded draft of those questions (each round's answer is a
  draft the gate may judge): AUROC with a bootstrap 95% CI over questions, Brier, ECE, and the over- and
  under-trigger at each form's accept threshold; and, where the rounds were critiqued, the critic's own
  P(supported) on the same drafts;
- the draft alone (one ranked read, no critic: plain RAG over the ranker) against the program's policy, replayed: EM per question form, EM where
  every gold paragraph was in the evidence, LM calls, with the paired difference and its CI.
"""

from __future__ import annotations

from typing import Any

from experiments.lab.studies import recording_study, rounded_diff
from optimize import replay
from optimize.gate_fitting import report, round_cases
from optimize.stats import paired_bootstrap
from program.sharp.forms import FORMS
from program.sharp.loop import gate_probability
from program.sharp.policy import neutral_policy
from program.sharp.rounds import titles_only


def critic_report(program: Any, records: dict, examples: list, seed: int = 0, passages: Any = titles_only) -> dict:
    """The gate (and the critic LM where it read) on every recorded round of ``examples``, settled as the
    program settles it."""
    policy = program.config
    cases = round_cases(records, examples, policy, passages)
    probs = [gate_probability(c["features"], policy) for c in cases]
    out: dict = {"all": report(probs, cases, policy.accept_threshold, seed)}
    drafts = [c for c in cases if c["action"] == "draft"]
    out["first_drafts"] = report([gate_probability(c["features"], policy) for c in drafts], drafts,
                                 policy.accept_threshold, seed)  # fmt: skip
    for form in FORMS:
        mine = [c for c in cases if c["form"] == form]
        if len({c["label"] for c in mine}) == 2:
            p = [gate_probability(c["features"], policy) for c in mine]
            out[form] = report(p, mine, policy.accept_for(form), seed)
    critiqued = [c for c in cases if c["critic"] is not None]
    if len({c["label"] for c in critiqued}) == 2:
        out["critic_lm_alone"] = report([c["critic"]["p_supported"] for c in critiqued], critiqued, 0.5, seed)
    return out


def policy_report(program: Any, records: dict, examples: list, seed: int = 0, passages: Any = titles_only) -> dict:
    """The draft alone (as the reader wrote it) against the program's policy, replayed over the same
    questions, per form."""
    draft = program.config.replace(**neutral_policy())
    runs = {
        "draft only": replay.score(records, examples, draft, seed, passages),
        "program": replay.score(records, examples, program.config, seed, passages),
    }
    rows = {name: {r["id"]: r for r in res.rows} for name, res in runs.items()}
    forms = {ex.id: records[ex.id]["form"] for ex in examples}
    out: dict = {}
    for form in ("all", *FORMS, "all gold in evidence"):
        ids = [
            i
            for i in rows["program"]
            if form == "all" or forms[i] == form or (form == "all gold in evidence" and rows["program"][i]["all_gold"])
        ]
        if not ids:
            continue
        em = {name: {i: float(r[i]["em"]) for i in ids} for name, r in rows.items()}
        diff = paired_bootstrap(em["program"], em["draft only"], seed=seed)
        out[form] = {
            "questions": len(ids),
            **{f"em {name}": round(sum(v.values()) / len(ids), 3) for name, v in em.items()},
            "delta_em": rounded_diff(diff),
        }
    out["lm_calls_per_q"] = {name: round(res.metrics["lm_calls_per_q"], 2) for name, res in runs.items()}
    out["recorded_seconds_per_q"] = {name: round(res.metrics["live_seconds_per_q"], 1) for name, res in runs.items()}
    return out


def main() -> None:
    recording_study(
        __doc__,
        "train",
        lambda program, records, examples, passages, seed: {
            "critic": critic_report(program, records, examples, seed, passages),
            "policy": policy_report(program, records, examples, seed, passages),
        },
    )


if __name__ == "__main__":
    main()
