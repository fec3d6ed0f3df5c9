"""The critic's calibrator: P(the evidence is complete) from the critique and what retrieval knows.

The 1.5B critic's token P(sufficient) separates complete from incomplete evidence only weakly. The
retriever knows more: how sure the reranker is of the best passages, how far the second drops below
the first, how many distinct pages and searches the evidence spans. A logistic regression over those
features, fitted on critiques harvested from train runs (labels from the gold paragraphs) by
``sharp compile --target critic``, turns them into one calibrated probability that the loop compares with
its threshold. It is stored as plain numbers in the program's config (program/linear.py), so it is saved,
exported and loaded with the program; a digest of those numbers refuses a tampered one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from program.linear import LinearModel, LinearModelError
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


class CalibratorError(LinearModelError):
    """A calibrator whose numbers do not match its digest, or that names unknown features."""


class Calibrator(LinearModel):
    """A fitted logistic regression over standardised :data:`FEATURES`: plain numbers and their digest."""

    KNOWN = FEATURES
    KIND = "calibrator"
    REFIT = "sharp compile --target critic"
    ERROR = CalibratorError

    def check_fits(self, corpus_sha256: str | None, reranker: str | None) -> None:
        """Refuse to read features from another retriever than the one the calibrator was fitted on: its
        score features are a given reranker's probabilities over a given corpus."""
        fitted = self.fitted_on
        problems = [p for p in [self.corpus_problem(corpus_sha256)] if p]
        if "reranker" in fitted and fitted.get("reranker") != reranker:
            problems.append(f"it was fitted with reranker {fitted.get('reranker')!r}, this retriever uses {reranker!r}")
        if problems:
            raise CalibratorError(
                "the program's critic calibrator does not fit this retriever: "
                + "; ".join(problems)
                + ". Fit one for it with `sharp compile --target critic` on this dataset, or drop it "
                "(--set calibrator=null)"
            )
