"""The answer critic's calibrated probability: P(the draft answer is right), from what the round knows.

A draft is one round's answer: the generator's reading of the ranked evidence, a re-read after a new
search, or a decomposed read. What the loop knows about it without another LM call: the generator's own
token confidence in the answer, whether the answer occurs in the evidence or in the question, whether it
has the form the question asks for (one of a choice question's options, yes/no for a yes/no question),
the evidence ranker's scores, which repair wrote it and whether it agrees with the first draft. A logistic
regression over those features (the *gate*) gives P(right) with no LM call; where the critic LM is asked
too (program.signatures.CritiqueAnswer), a second one (the *judge*) adds its P(supported). Both are fitted
on recorded train drafts, labelled by exact match with the gold answer (``sharp compile --target critic``),
and stored as plain numbers in the program's config (program/linear.py), so they are saved, exported and
loaded with the program; a digest refuses an edited one, and :meth:`AnswerCalibrator.check_fits` refuses
one fitted on another corpus.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from program.answers import clean_answer
from program.forms import matches_option, options, question_form
from program.linear import LinearModel, LinearModelError
from program.types import Passage

# what a draft's features are when the generator returned no log-probabilities (a provider without them):
# an average reading, and the flag ``lp_missing`` so the calibrator can learn what that costs
MISSING_LOGPROB = -0.5

GATE_FEATURES = (
    "lp_mean",  # the answer tokens' mean log-probability (the generator's own confidence)
    "lp_min",  # their lowest
    "p_first",  # the first answer token's probability
    "lp_missing",  # 1 when the LM returned no log-probabilities (the three above are then averages)
    "answer_words",  # the answer's length in words (capped at 20)
    "unknown",  # the answer is empty or "unknown"
    "in_evidence",  # the answer occurs in the evidence it was read from
    "in_question",  # the answer occurs in the question (a bridge question answered with its own entity)
    "form_comparison",  # the question's form (program.forms)
    "form_yesno",
    "option_miss",  # a choice question answered with none of its options
    "yesno_mismatch",  # a yes/no question not answered yes/no, or a yes/no answer to another question
    "score_1",  # the ranker's probabilities of the evidence's best three passages
    "score_2",
    "score_3",
    "action_retrieve",  # which round wrote the draft: a re-read after a new search, a decomposed read
    "action_decompose",
    "agrees_draft",  # a repair's answer equals the first draft's
)
CRITIC_FEATURES = (
    "p_supported",  # the critic's P("supported") from its verdict tokens
    "said_supported",  # its written verdict is "supported"
    "said_incomplete",  # its written verdict is "incomplete"
)
FEATURES = GATE_FEATURES + CRITIC_FEATURES


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", str(text).lower()).split())


def same_answer(a: str, b: str) -> bool:
    """Whether two answers say the same (case, punctuation and spacing aside)."""
    return bool(_norm(a)) and _norm(a) == _norm(b)


def draft_features(
    question: str,
    answer: str,
    evidence: Sequence[Passage],
    confidence: Mapping[str, float] | None,
    action: str = "draft",
    first_answer: str | None = None,
) -> dict[str, float]:
    """The gate's features of one draft (see :data:`GATE_FEATURES`); ``confidence`` is the generator's
    answer confidence (program.confidence.answer_confidence) or None when it returned no log-probabilities;
    ``first_answer`` the first draft's answer (for a repair's agreement)."""
    text = _norm(" ".join(f"{p.title} {p.text}" for p in evidence))
    a = _norm(clean_answer(answer, question))
    form = question_form(question)
    opts = options(question)
    yes_no = a in ("yes", "no")
    scores = sorted((float(p.score) for p in evidence), reverse=True) + [0.0, 0.0, 0.0]
    conf = confidence or {}
    return {
        "lp_mean": float(conf.get("mean", MISSING_LOGPROB)),
        "lp_min": float(conf.get("min", MISSING_LOGPROB)),
        "p_first": float(conf.get("first", 2.718281828**MISSING_LOGPROB)),
        "lp_missing": float(confidence is None),
        "answer_words": float(min(len(a.split()), 20)),
        "unknown": float(a in ("", "unknown")),
        "in_evidence": float(bool(a) and f" {a} " in f" {text} "),
        "in_question": float(bool(a) and f" {a} " in f" {_norm(question)} "),
        "form_comparison": float(form == "comparison"),
        "form_yesno": float(form == "yesno"),
        "option_miss": float(bool(opts) and not matches_option(a, opts)),
        "yesno_mismatch": float((form == "yesno") != yes_no),
        "score_1": scores[0],
        "score_2": scores[1],
        "score_3": scores[2],
        "action_retrieve": float(action == "retrieve"),
        "action_decompose": float(action == "decompose"),
        "agrees_draft": float(action != "draft" and first_answer is not None and same_answer(answer, first_answer)),
    }


def critic_features(critique: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The judge's extra features from a read critique (program.critique.read_critique), or None when the
    critic was not asked or its reply was discarded."""
    if not critique or critique.get("p_supported") is None:
        return None
    return {
        "p_supported": float(critique["p_supported"]),
        "said_supported": float(critique.get("verdict") == "supported"),
        "said_incomplete": float(critique.get("verdict") == "incomplete"),
    }


class CalibratorError(LinearModelError):
    """A calibrator whose numbers do not match its digest, that names unknown features, or that was fitted
    on another corpus or ranker than the program's retriever uses."""


class AnswerCalibrator(LinearModel):
    """P(the draft is right): a fitted logistic regression over standardised :data:`FEATURES`."""

    KNOWN = FEATURES
    KIND = "answer calibrator"
    REFIT = "sharp compile --target critic"
    ERROR = CalibratorError

    @property
    def needs_critic(self) -> bool:
        return any(f in CRITIC_FEATURES for f in self.features)

    def check_fits(self, corpus_sha256: str | None, ranker: str | None, dataset: str | None = None) -> None:
        """Refuse to judge drafts from another retriever than the one the calibrator was fitted on: its
        score features are a given ranker's probabilities over a given corpus."""
        fitted = self.fitted_on
        problems = [p for p in [self.corpus_problem(corpus_sha256, dataset)] if p]
        if "ranker" in fitted and fitted.get("ranker") != ranker:
            problems.append(f"it was fitted with ranker {fitted.get('ranker')!r}, this retriever uses {ranker!r}")
        if problems:
            raise CalibratorError(
                "the program's answer calibrator does not fit this index: "
                + "; ".join(problems)
                + ". Fit one for it with `sharp compile --target critic` on this dataset, or drop it "
                "(--set gate=null --set judge=null)"
            )


def ranker_id(settings: Any) -> str | None:
    """What identifies a retriever's evidence ranker (``settings``: its RetrieverConfig) for the calibrators
    fitted over its scores: its digest's first 12 characters, or None without a ranker."""
    ranker = getattr(settings, "ranker", None)
    return str(ranker.digest)[:12] if ranker is not None else None


def check_calibrators(config: Any, corpus_sha256: str | None, ranker: str | None, dataset: str | None) -> None:
    """A program's answer calibrators (``config``'s gate and judge) must have been fitted on this index's
    corpus (``corpus_sha256``) with this ranker (:func:`ranker_id`); a CalibratorError says which does not."""
    for calibrator in (getattr(config, "gate", None), getattr(config, "judge", None)):
        if calibrator is not None:
            calibrator.check_fits(corpus_sha256, ranker, dataset)
