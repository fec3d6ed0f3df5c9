"""How SHARP reads the answer critic's reply: the rules shared by the program, replay and critic compilation.

A critique is the critic's output fields (program.signatures.CritiqueAnswer) plus, where the LM returned
them, the verdict's token probabilities. :func:`read_critique` turns it into what the loop acts on: the
verdict, and P(supported) and where it came from. A reply the
loop cannot trust (no verdict, an unknown one, no 0-1 confidence) is *discarded*: the draft stands as the
gate judged it, and the critique is traced and counted with its ``critic_problem``.
"""

from __future__ import annotations

from typing import Any, get_args

from program.reading.confidence import TOP_LOGPROBS, choice_probabilities
from program.reading.parsing import as_score, salvage_json
from program.signatures import Verdict

VERDICTS: tuple[str, ...] = get_args(Verdict)


def critic_lm_config(max_tokens: int) -> dict:
    """The LM settings of every critic call: its token cap, and the verdict's token probabilities."""
    return {"max_tokens": max_tokens, "logprobs": True, "top_logprobs": TOP_LOGPROBS}


def critique_problem(fields: dict, parsed: bool = True) -> str | None:
    """Why SHARP discards a critique (None: it is used): nothing readable, or a verdict outside
    :data:`VERDICTS`, or no 0-1 confidence."""
    verdict = fields.get("verdict")
    if not parsed and not fields:
        return "unparseable"
    if verdict not in VERDICTS:
        return f"no valid verdict ({verdict!r})"
    if as_score(fields.get("confidence")) is None:
        return f"no 0-1 confidence ({fields.get('confidence')!r})"
    return None


def read_critique(fields: dict, parsed: bool = True, logprobs: Any = None) -> dict:
    """A critic's output fields as SHARP acts on them. ``p_supported`` is P("supported") from the verdict's
    token probabilities (``confidence_source`` "token"), else from the written verdict and confidence
    ("verbal": a provider that returns no log-probabilities), else None for a discarded critique
    ("discarded")."""
    problem = critique_problem(fields, parsed)
    probs = None
    if problem:
        verdict, p_supported, source = None, None, "discarded"
    else:
        verdict = fields["verdict"]
        probs = choice_probabilities(logprobs, "verdict", VERDICTS) if logprobs is not None else None
        if probs is not None:
            p_supported, source = probs["supported"], "token"
        else:
            confidence = as_score(fields["confidence"])
            p_supported = confidence if verdict == "supported" else 1.0 - confidence
            source = "verbal"
    return {
        "verdict": verdict,
        "p_supported": None if p_supported is None else round(float(p_supported), 4),
        "confidence_source": source,
        "verdict_probabilities": probs and {k: round(v, 4) for k, v in probs.items()},
        "critic_problem": problem,
    }


def output_fields(pred: Any, step: dict) -> dict:
    """A step's output fields: the parsed prediction, else what can be salvaged from its raw reply
    (then the step is marked ``salvaged``)."""
    if pred is not None:
        return pred.toDict()
    fields = salvage_json(step.get("raw_output"))
    if fields:
        step["salvaged"] = True
    return fields
