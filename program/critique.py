"""How SHARP reads a critique: the rules shared by the program, replay and critic compilation.

A critique is the critic's output fields plus, where the LM returned them, the verdict's token
probabilities. :func:`read_critique` turns it into what the loop acts on (verdict, confidence,
P(sufficient) and where it came from, the missing facts and suggested queries), discarding output
it cannot trust; :func:`critic_stops` says whether it ends the loop at a threshold.
"""

from __future__ import annotations

from typing import Any

from program.confidence import TOP_LOGPROBS, UNKNOWN_P_SUFFICIENT, choice_probabilities, verbal_p_sufficient
from program.parsing import as_score, items, salvage_json

VERDICTS = ("sufficient", "insufficient", "contradictory")


def critic_lm_config(max_tokens: int, confidence_mode: str) -> dict:
    """The LM settings of every critic call: its token cap, and logprobs when P(sufficient) is read
    from the verdict's tokens. Critic compilation calls the critic with the same settings (and the
    same adapter), so it scores the prompts the program sends."""
    lm_config: dict = {"max_tokens": max_tokens}
    if confidence_mode == "token":
        lm_config.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    return lm_config


def critique_problem(fields: dict, parsed: bool = True) -> str | None:
    """Why SHARP discards a critique (None: it is used): nothing readable, a verdict outside
    :data:`VERDICTS` or no 0-1 confidence, or "sufficient" while naming missing facts and queries."""
    verdict = fields.get("verdict")
    if not parsed and not fields:
        return "unparseable"
    if verdict not in VERDICTS or as_score(fields.get("confidence")) is None:
        return f"invalid fields (verdict={verdict!r}, confidence={fields.get('confidence')!r})"
    if verdict == "sufficient" and items(fields.get("suggested_queries")) and items(fields.get("missing_information")):
        return "inconsistent: sufficient but lists missing information"
    return None


def read_critique(fields: dict, parsed: bool = True, logprobs: Any = None, confidence_mode: str = "token") -> dict:
    """A critic's output fields as SHARP acts on them: the verdict, its confidence, P(sufficient) and
    where that came from ("token": the verdict's token probabilities, with ``confidence_mode`` token
    and logprobs present; "verbal": the written verdict and confidence; "fallback": a discarded
    critique, read as "insufficient" with P(sufficient) unknown). A critique whose logprobs are
    missing (a provider that returns none) is read verbally, and says so in ``confidence_source``."""
    problem = critique_problem(fields, parsed)
    probs = None
    if problem:  # discarded: the loop retries (verdict "insufficient"); P(sufficient) is unknown
        verdict, confidence, source, p_sufficient = "insufficient", 0.0, "fallback", UNKNOWN_P_SUFFICIENT
    else:
        verdict, confidence = fields["verdict"], as_score(fields["confidence"])
        if confidence_mode == "token" and (probs := choice_probabilities(logprobs, "verdict", VERDICTS)) is not None:
            confidence, source, p_sufficient = probs[verdict], "token", round(probs["sufficient"], 4)
        else:
            source, p_sufficient = "verbal", round(verbal_p_sufficient(verdict, confidence), 4)
    return {
        "verdict": verdict,
        "confidence": round(confidence, 4),
        "p_sufficient": p_sufficient,
        "confidence_source": source,
        "verdict_probabilities": probs and {k: round(v, 4) for k, v in probs.items()},
        "missing_information": items(fields.get("missing_information"))[:5],
        "suggested_queries": items(fields.get("suggested_queries"))[:5],
        "critic_problem": problem,
    }


def critic_stops(crit: dict, threshold: float) -> bool:
    """Whether a critique ends the loop: its calibrated P(sufficient) (``p_calibrated``, set when the
    program has a calibrator) or else its token P(sufficient) at or above the threshold; a critique read
    verbally stops on a "sufficient" verdict whose written confidence is."""
    if crit.get("p_calibrated") is not None:
        return crit["p_calibrated"] >= threshold
    if crit.get("confidence_source") == "token":
        return crit["p_sufficient"] >= threshold
    return crit["verdict"] == "sufficient" and crit["confidence"] >= threshold


def output_fields(pred: Any, step: dict) -> dict:
    """A step's output fields: the parsed prediction, else what can be salvaged from its raw reply
    (then the step is marked ``salvaged``)."""
    if pred is not None:
        return pred.toDict()
    fields = salvage_json(step.get("raw_output"))
    if fields:
        step["salvaged"] = True
    return fields
