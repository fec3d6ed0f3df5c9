"""The generator step shared by every system: answer from numbered evidence, never crash."""

from __future__ import annotations

from typing import Any

import dspy

from program.reading.answers import clean_answer
from program.reading.confidence import TOP_LOGPROBS, answer_confidence, first_alternatives, has_logprobs
from program.reading.evidence import format_evidence
from program.reading.parsing import salvage_json
from program.tracing import Tracer
from program.types import Passage

# JSON (grammar-constrained locally) rather than chat markers: the 1.5B model answers better this way,
# as well as with a one-line raw prompt (experiments/findings/reading.md, 'Generator formats')
GENERATOR_ADAPTER = "json"
# a short span and a few passage numbers fit easily; a model looping inside the answer string is cut
GENERATOR_MAX_TOKENS = 128


def answer_from_evidence(
    generator: dspy.Module,
    q: str,
    evidence: list[Passage],
    passage_chars: int,
    tr: Tracer,
    role: str = "generator",
    adapter: str | None = GENERATOR_ADAPTER,
    max_tokens: int = GENERATOR_MAX_TOKENS,
    confidence: bool = False,
    inputs: dict | None = None,
) -> tuple[str, list[str]]:
    """Run ``generator`` (a GenerateAnswer predictor); return the cleaned answer and cited ids.

    An unparseable output is salvaged from the raw text when possible, else the answer is
    "unknown"; the step records which fallback ran. With ``confidence`` the call asks for token
    log-probabilities and the step records the answer's (``answer_confidence``: mean and lowest token
    log-probability, first-token probability; ``answer_top``: the alternatives weighed for its first token,
    which give P("yes") against P("no")), or None with ``confidence_problem`` saying why. ``inputs``: the
    predictor's other input fields (a focused read's intermediate entity).
    """
    config: dict = {"max_tokens": max_tokens}
    if confidence:
        config.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    pred, step = tr.call(
        role,
        generator,
        {"question": q[:200], "n_passages": len(evidence)},
        adapter=adapter,
        config=config,
        question=q,
        evidence=format_evidence(evidence, passage_chars),
        **(inputs or {}),
    )
    if confidence:
        record_confidence(step, pred)
    if pred is not None:
        answer = clean_answer(getattr(pred, "answer", ""), q)
        numbers = getattr(pred, "supporting_passages", None) or []
    else:
        raw = salvage(step.get("raw_output"))
        step["fallback"] = "salvaged raw output" if raw else "no answer"
        answer, numbers = (clean_answer(raw, q) if raw else "unknown"), []
    cited = [evidence[n - 1].id for n in ints(numbers) if 1 <= n <= len(evidence)]
    step.update(answer=answer, cited_ids=cited, evidence_ids=[p.id for p in evidence])
    return answer, cited


def record_confidence(step: dict, pred: Any, field: str = "answer") -> None:
    """Put the answer's token confidence into ``step`` (``answer_confidence``), or None and the reason
    (``confidence_problem``: the reply did not parse, or the LM returned no log-probabilities)."""
    logprobs = getattr(pred, "logprobs", None) if pred is not None else None
    found = answer_confidence(logprobs, field) if logprobs is not None else None
    step["answer_confidence"] = {k: round(v, 4) for k, v in found.items()} if found else None
    if found:
        top = first_alternatives(logprobs, field)
        step["answer_top"] = [[text, round(lp, 4)] for text, lp in top] if top else None
    if found is None:
        step["confidence_problem"] = (
            "no parsed reply"
            if pred is None
            else "no log-probabilities"
            if not has_logprobs(logprobs)
            else "answer not found"
        )
    if isinstance(pred, dspy.Prediction) and "logprobs" in pred:
        # the step holds all the loop reads of them; the raw log-probabilities (some 19,000 characters a reply
        # at 10 alternatives a token) leave the prediction, so a trace an optimizer reflects on (GEPA's
        # reflective dataset: every output field of the call) fits a small model's context
        del pred["logprobs"]


def ints(values: Any) -> list[int]:
    out = []
    for v in values if isinstance(values, (list, tuple)) else [values]:
        try:
            out.append(int(str(v).strip().strip("[]")))
        except ValueError:
            continue
    return out


def salvage(raw: str | None) -> str:
    """The answer field of a raw reply: a (possibly cut) JSON object, a ChatAdapter reply, or the
    first line of the reply itself."""
    if not raw:
        return ""
    if raw.lstrip().startswith("{"):
        answer = salvage_json(raw).get("answer")
        return " ".join(str(answer).split())[:200] if answer is not None else ""
    text = raw.split("[[ ## answer ## ]]", 1)[-1].split("[[ ##", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:200] if lines else ""
