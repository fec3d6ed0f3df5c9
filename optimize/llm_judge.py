"""LLM-as-judge metrics (off by default): answer accuracy and faithfulness, on the judge role.

* AnswerAccuracy: the judge rates the answer against the reference 0/2/4, then again with the
  roles swapped (the reference rated against the answer); the mean of the two, divided by 4, lies
  in {0, .25, .5, .75, 1}. A rating that cannot be read is left out (recorded); none -> None.
* Faithfulness: the answer is rewritten as atomic claims; each is checked against the passages
  the system used; the score is the share supported. No passages, or an abstention -> None.

Every judge call is accounted (its own ledger, role ``judge``) and never crashes a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy
from pydantic import Field

from program.config import StrictConfig
from program.lm.accounting import recording
from program.reading.evidence import format_evidence
from program.signatures import ExtractClaims, RateAnswer, VerifyClaim
from program.systems.common import as_bool, graded, items
from program.tracing import Budget, Tracer

RATINGS = (0, 2, 4)
ABSTENTIONS = {"", "unknown", "i don't know", "cannot answer", "no answer"}


class JudgeConfig(StrictConfig):
    accuracy: bool = True
    faithfulness: bool = True
    max_claims: int = Field(5, ge=1, le=20)
    passage_chars: int = Field(600, ge=50, le=5000)


def parse_rating(value: Any) -> int | None:
    """0, 2 or 4 from '4', 4, '4/4', 'Rating: 2'; anything else -> None."""
    text = str(value).strip().lower().replace("rating:", "").strip() if value is not None else ""
    try:
        r = float(text.split("/")[0].split()[0]) if text else None
    except ValueError:
        return None
    return int(r) if r is not None and r in RATINGS else None


def normalize_ratings(ratings: Sequence[int | None]) -> float | None:
    """Mean of the readable 0/2/4 ratings divided by 4: one of {0, .25, .5, .75, 1}, or None."""
    valid = [r for r in ratings if r in RATINGS]
    return sum(valid) / (4 * len(valid)) if valid else None


class AnswerAccuracy(dspy.Module):
    """Predictor: rater (RateAnswer), called twice with the roles swapped."""

    def __init__(self):
        super().__init__()
        self.rater = dspy.Predict(RateAnswer)

    def forward(self, question: str, answer: str, reference: str, tracer: Tracer) -> dict:
        ratings = []
        for order, (ref, resp) in enumerate([(reference, answer), (answer, reference)]):
            rating, step = graded(
                tracer,
                "judge_accuracy",
                self.rater,
                "rating",
                parse_rating,
                None,
                "rating",
                {"order": order},
                question=question,
                reference=ref,
                response=resp,
            )
            ratings.append(rating)
        return {"judge_accuracy": normalize_ratings(ratings), "judge_ratings": ratings}


class Faithfulness(dspy.Module):
    """Predictors: extractor (ExtractClaims), verifier (VerifyClaim, once per claim)."""

    def __init__(self, max_claims: int = 5, passage_chars: int = 600):
        super().__init__()
        self.max_claims, self.passage_chars = max_claims, passage_chars
        self.extractor = dspy.Predict(ExtractClaims)
        self.verifier = dspy.Predict(VerifyClaim)

    def forward(self, question: str, answer: str, passages: list, tracer: Tracer) -> dict:
        if not passages or answer.strip().lower() in ABSTENTIONS:
            return {"judge_faithfulness": None, "judge_claims": [], "judge_supported": []}
        claims, _ = graded(
            tracer,
            "judge_claims",
            self.extractor,
            "claims",
            lambda v: items(v) or None,
            [],
            "claims",
            {"answer": answer[:100]},
            question=question,
            answer=answer,
        )
        claims = claims[: self.max_claims]
        evidence = format_evidence(passages, self.passage_chars)
        verdicts = []
        for claim in claims:
            ok, step = graded(
                tracer,
                "judge_verify",
                self.verifier,
                "supported",
                as_bool,
                None,
                "supported",
                {"claim": claim[:200]},
                evidence=evidence,
                claim=claim,
            )
            verdicts.append(ok)
        readable = [v for v in verdicts if v is not None]
        score = sum(readable) / len(readable) if readable else None
        return {"judge_faithfulness": score, "judge_claims": claims, "judge_supported": verdicts}


class Judge(dspy.Module):
    """Both judge metrics for one (example, prediction); every predictor runs on the judge role."""

    ROLE_MAP = {"accuracy": "judge", "faithfulness": "judge"}

    def __init__(self, config: JudgeConfig | None = None):
        super().__init__()
        self.config = cfg = config or JudgeConfig()
        self.accuracy = AnswerAccuracy()
        self.faithfulness = Faithfulness(cfg.max_claims, cfg.passage_chars)

    def forward(self, example: Any, prediction: Any) -> dict:
        answer = str(getattr(prediction, "answer", "") or "")
        passages = list(getattr(prediction, "passages", None) or [])
        with recording() as ledger:
            tr = Tracer(Budget(max_lm_calls=None), ledger)
            out: dict[str, Any] = {}
            if self.config.accuracy:
                out.update(self.accuracy(question=example.question, answer=answer, reference=example.answer, tracer=tr))
            if self.config.faithfulness:
                out.update(self.faithfulness(question=example.question, answer=answer, passages=passages, tracer=tr))
        cost = ledger.summary()
        out["judge_problems"] = [f"{s['role']}: {s['problem']}" for s in tr.steps if s.get("problem")]
        out["judge_lm_calls"] = cost["lm_calls"]
        out["judge_tokens"] = cost["prompt_tokens"] + cost["completion_tokens"]
        return out


def judged_row(row_fn: Any, judge: Judge) -> Any:
    """A row function for optimize.evaluate.evaluate: the usual row plus the judge's fields."""

    def row(example: Any, prediction: Any) -> dict:
        return {**row_fn(example, prediction), **judge(example=example, prediction=prediction)}

    return row
