"""The critic's calibrator: P(the evidence is complete) from the critique and what retrieval knows.

The 1.5B critic's token P(sufficient) separates complete from incomplete evidence only weakly. The
retriever knows more: how sure the reranker is of the best passages, how far the second drops below
the first, how many distinct pages and searches the evidence spans. A logistic regression over those
features, fitted on critiques harvested from train runs (labels from the gold paragraphs) by
``sharp compile --target critic``, turns them into one calibrated probability that the loop compares with
its threshold. It is stored as plain numbers (means, scales, weights, bias) in the program's config, so
it is saved, exported and loaded with the program; a digest of those numbers refuses a tampered one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, model_validator

from program.config import StrictConfig
from program.digest import digest
from program.errors import ConfigError
from program.types import Passage

# Every feature a calibrator may use, computed by :func:`critique_features`.
FEATURES = (
    "p_token",  # the critic's P(sufficient) (token probabilities; written confidence as a fallback)
    "said_sufficient",  # 1 when the written verdict is "sufficient"
    "score_1",  # the reranker's probability for the best, second and third passages of the evidence
    "score_2",
    "score_3",
    "margin_23",  # score_2 - score_3: two clearly relevant passages, then a drop
    "titles",  # distinct page titles in the evidence
    "queries",  # distinct searches that contributed evidence passages
    "question_covered",  # share of the question's capitalised names found in the evidence
    "round",  # the loop round (0 = the first critique)
)
_NAME = re.compile(r"\b[A-Z][\w'&.-]*(?:\s+(?:of|the|de|and|&|[A-Z][\w'&.-]*))*")


class CalibratorError(ConfigError):
    """A calibrator whose numbers do not match its digest, or that names unknown features."""


def question_names(question: str) -> list[str]:
    """The capitalised names of a question (its first word only when it is a name's start elsewhere)."""
    words = question.split()
    rest = " ".join(words[1:]) if words else ""
    return [m.group(0).strip() for m in _NAME.finditer(rest) if len(m.group(0).strip()) > 2]


def critique_features(
    crit: Mapping[str, Any],
    evidence: Sequence[Passage],
    question: str,
    round_no: int,
    sources: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """The features of one critique over ``evidence`` (passages with the reranker's score in ``score``;
    ``sources``: passage id -> the query that found it)."""
    scores = sorted((float(p.score) for p in evidence), reverse=True) + [0.0, 0.0, 0.0]
    text = " ".join(f"{p.title} {p.text}" for p in evidence).lower()
    names = question_names(question)
    covered = sum(n.lower() in text for n in names) / len(names) if names else 1.0
    p = crit.get("p_sufficient")
    return {
        "p_token": float(p) if p is not None else 0.5,
        "said_sufficient": float(crit.get("verdict") == "sufficient"),
        "score_1": scores[0],
        "score_2": scores[1],
        "score_3": scores[2],
        "margin_23": scores[1] - scores[2],
        "titles": float(len({p.title for p in evidence})),
        "queries": float(len({(sources or {}).get(p.id, "") for p in evidence})),
        "question_covered": covered,
        "round": float(round_no),
    }


class Calibrator(StrictConfig):
    """A fitted logistic regression over standardised :data:`FEATURES`: plain numbers and their digest."""

    features: tuple[str, ...]
    means: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    fitted_on: dict = Field(default_factory=dict)  # dataset, corpus digest, cases, held-out scores
    digest: str = ""

    @model_validator(mode="after")
    def _check(self) -> Calibrator:
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise CalibratorError(f"calibrator names unknown features {unknown}; known: {', '.join(FEATURES)}")
        n = len(self.features)
        if not (len(self.means) == len(self.scales) == len(self.weights) == n) or n == 0:
            raise CalibratorError("calibrator: features, means, scales and weights must have the same non-zero length")
        if self.digest != numbers_digest(self):
            raise CalibratorError(
                "the calibrator's numbers do not match its digest (edited by hand or damaged); refit it with "
                "`sharp compile --target critic`"
            )
        return self

    def with_info(self, **info: Any) -> Calibrator:
        """The same calibrator with more ``fitted_on`` information (its digest recomputed)."""
        return make_calibrator(
            self.features, self.means, self.scales, self.weights, self.bias, {**self.fitted_on, **info}
        )

    def check_fits(self, corpus_sha256: str | None, reranker: str | None) -> None:
        """Refuse to read features from another retriever than the one the calibrator was fitted on: its
        score features are a given reranker's probabilities over a given corpus."""
        fitted = self.fitted_on
        problems = []
        if corpus_sha256 and fitted.get("corpus_sha256") and fitted["corpus_sha256"] != corpus_sha256:
            problems.append(
                f"it was fitted on corpus {str(fitted['corpus_sha256'])[:12]} ({fitted.get('dataset')!r}), "
                f"this index holds corpus {corpus_sha256[:12]}"
            )
        if "reranker" in fitted and fitted.get("reranker") != reranker:
            problems.append(f"it was fitted with reranker {fitted.get('reranker')!r}, this retriever uses {reranker!r}")
        if problems:
            raise CalibratorError(
                "the program's critic calibrator does not fit this retriever: "
                + "; ".join(problems)
                + ". Fit one for it with `sharp compile --target critic` on this dataset, or drop it "
                "(--set calibrator=null)"
            )

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(
            w * (float(features[f]) - m) / (s or 1.0)
            for f, m, s, w in zip(self.features, self.means, self.scales, self.weights)
        )
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def numbers_digest(cal: Any) -> str:
    """sha256 over a calibrator's features and numbers (what decides its output)."""
    payload = {k: getattr(cal, k) for k in ("features", "means", "scales", "weights", "bias")}
    payload["fitted_on"] = getattr(cal, "fitted_on", {})
    return digest(payload)


def make_calibrator(
    features: Sequence[str],
    means: Sequence[float],
    scales: Sequence[float],
    weights: Sequence[float],
    bias: float,
    fitted_on: Mapping[str, Any],
) -> Calibrator:
    """A calibrator with its digest computed (what fitting code calls)."""

    class _N:  # the numbers, for the digest
        pass

    n = _N()
    n.features, n.means, n.scales = tuple(features), tuple(map(float, means)), tuple(map(float, scales))
    n.weights, n.bias, n.fitted_on = tuple(map(float, weights)), float(bias), dict(fitted_on)
    return Calibrator(
        features=n.features,
        means=n.means,
        scales=n.scales,
        weights=n.weights,
        bias=n.bias,
        fitted_on=n.fitted_on,
        digest=numbers_digest(n),
    )
