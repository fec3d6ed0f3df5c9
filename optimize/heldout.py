"""A compiled program's gate and policy on recorded questions it was neither fitted nor tuned on (read from the
recording, no LM call): what `sharp build` reports as its held-out check and ships as the program's figures.

- :func:`critic_report`: the gate's calibrated P(right) on every recorded round of those questions (each round's
  answer is a draft the gate may judge): AUROC with a bootstrap 95% CI over questions, Brier, ECE, and the over-
  and under-trigger at each form's accept threshold; and, where the rounds were critiqued, the critic's own
  P(supported) on the same drafts;
- :func:`policy_report`: the draft alone (one ranked read, no critic: plain RAG over the ranker) against the
  program's policy, replayed: EM per question form, EM where every gold paragraph was in the evidence, LM calls,
  with the paired difference and its CI;
- :func:`figures`: the few numbers of both a shipped program's manifest entry records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optimize import replay
from optimize.gate_fitting import report, round_cases
from optimize.stats import paired_bootstrap
from program.sharp.forms import FORMS
from program.sharp.loop import gate_probability
from program.sharp.policy import neutral_policy
from program.sharp.rounds import titles_only


def rounded_diff(diff: dict | None) -> list[float] | None:
    """A paired bootstrap's difference and 95% CI, rounded to 3 places (None: too few questions)."""
    return [round(diff["diff"], 3), round(diff["ci"][0], 3), round(diff["ci"][1], 3)] if diff else None


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


def figures(heldout: Mapping[str, Any]) -> dict[str, Any]:
    """The held-out figures a shipped program's manifest entry records, from ``{"critic": critic_report,
    "policy": policy_report}`` (rounded to 3 places; "n/a" where the gate's AUROC is undefined: every held-out
    draft right, or every one wrong)."""
    gate, pol = heldout["critic"]["all"], heldout["policy"]["all"]
    found = {
        "gate_auroc_heldout": gate["auroc"],
        "gate_drafts_heldout": gate["drafts"],
        "heldout_em_draft": pol["em draft only"],
        "heldout_em_program": pol["em program"],
        "heldout_lm_calls_per_q": heldout["policy"]["lm_calls_per_q"]["program"],
        "heldout_questions": pol["questions"],
    }
    return {k: (round(v, 3) if isinstance(v, float) else v) if v is not None else "n/a" for k, v in found.items()}
