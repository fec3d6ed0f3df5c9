"""The answer critic's calibrated probability: P(the round's answer is right), from what the round knows.

A round's answer is the generator's reading of the ranked evidence (the draft), a re-read after a new search,
a focused read of the bridge entity's passage, or a comparison decided from one value read per entity. What
the loop knows about it without another LM call (:func:`round_features`): the reader's own token confidence,
whether the answer occurs in the evidence (in a passage it cites), whether it is the kind of thing the
question asks for (program/sharp/answer_types.py: a year for "what year", one of a choice question's options,
yes/no for a yes/no question), whether it names an evidence passage the question does not (the sign of an
answer that stopped at the intermediate entity), the yes/no margin, the evidence ranker's scores, which round
wrote it, how code settled it and whether it agrees with the draft. A logistic regression over those
features (the *gate*) gives P(right) with no LM call; where the critic LM is asked too
(program.signatures.CritiqueAnswer), a second one (the *judge*) adds its P(supported). Both are fitted on
recorded train rounds, labelled by exact match with the gold answer (``sharp compile --target critic``), and
stored as plain numbers in the program's config (program/linear.py), so they are saved, exported and loaded
with the program; a digest refuses an edited one, and :meth:`AnswerCalibrator.check_fits` refuses one fitted
on another corpus.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from program.linear import LinearModel, LinearModelError
from program.sharp.answer_types import mismatch
from program.sharp.forms import matches_option, options
from program.sharp.rounds import Round, Run
from program.sharp.spans import is_span, names_title, words

# what a round's confidence features are when the reader returned no log-probabilities (a provider without
# them): an average reading, and the flag ``lp_missing`` so the calibrator can learn what that costs
MISSING_LOGPROB = -0.5

GATE_FEATURES = (
    "lp_mean",  # the answer tokens' mean log-probability (the reader's own confidence; a comparison: its
    "lp_min",  # weakest value read's), their lowest,
    "p_first",  # the first answer token's probability
    "lp_missing",  # 1 when the LM returned no log-probabilities (the three above are then averages)
    "answer_words",  # the answer's length in words (capped at 20)
    "unknown",  # the answer is empty or "unknown"
    "in_evidence",  # the answer occurs in the evidence it was read from
    "in_cited",  # ... in a passage the reader cited
    "in_question",  # the answer occurs in the question (a bridge question answered with its own entity)
    "names_passage",  # the answer is the title of an evidence passage the question does not name
    "type_mismatch",  # the answer is not the kind of thing the question asks for (program/sharp/answer_types.py)
    "form_comparison",  # the question's form (program.sharp.forms)
    "form_yesno",
    "option_miss",  # a choice question answered with none of its options
    "yesno_mismatch",  # a yes/no question not answered yes/no, or a yes/no answer to another question
    "yes_margin",  # |P(yes) - P(no)| of a yes/no answer read with log-probabilities (0 otherwise)
    "score_1",  # the ranker's probabilities of the evidence's best three passages
    "score_2",
    "score_3",
    "action_retrieve",  # which round wrote the answer: a re-read after a new search, a comparison of values
    "action_compare",  # read one entity at a time, a focused read of the bridge entity
    "action_focus",
    "by_code",  # code settled the answer (a comparison of parsed values, a yes/no threshold)
    "agrees_draft",  # a repair's answer equals the draft's
    "action_chain",  # a chain of single-hop reads wrote it (program/sharp/chain.py),
    "chain_by_rule",  # ... planned by rule (not by the planner LM),
    "hop_lp_min",  # ... its hops' weakest mean answer log-probability (0 for other rounds),
    "hop_mismatch",  # ... a hop answered with the wrong kind of thing for its hop question,
    "hop_titled",  # ... every later hop read the passage titled by the earlier hop's answer
)
CRITIC_FEATURES = (
    "p_supported",  # the critic's P("supported") from its verdict tokens
    "said_supported",  # its written verdict is "supported"
    "said_incomplete",  # its written verdict is "incomplete"
)
FEATURES = GATE_FEATURES + CRITIC_FEATURES


@lru_cache(maxsize=65536)
def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", str(text).lower()).split())


def same_answer(a: str, b: str) -> bool:
    """Whether two answers say the same (case, punctuation and spacing aside)."""
    return bool(_norm(a)) and _norm(a) == _norm(b)


def _confidence(rnd: Round) -> Mapping[str, float] | None:
    if rnd.action == "compare" and rnd.how != "composed":
        found = [v.confidence for v in rnd.values if v.confidence]
        return min(found, key=lambda c: c["mean"]) if found and len(found) == len(rnd.values) else None
    if rnd.action == "chain" and rnd.how != "union":
        return rnd.hops[-1].confidence if rnd.hops else None
    return rnd.read.confidence if rnd.read else None


def _chain_features(rnd: Round) -> dict[str, float]:
    """What a chain round knows of its hops (zeros for every other round)."""
    if rnd.action != "chain" or not rnd.hops:
        return {"action_chain": float(rnd.action == "chain"), "chain_by_rule": 0.0, "hop_lp_min": 0.0,
                "hop_mismatch": 0.0, "hop_titled": 0.0}  # fmt: skip
    means = [float((h.confidence or {}).get("mean", MISSING_LOGPROB)) for h in rnd.hops]
    titled = [any(names_title(answer, p) for p in h.evidence) for answer, h in zip(rnd.hop_answers, rnd.hops[1:])]
    return {
        "action_chain": 1.0,
        "chain_by_rule": float((rnd.plan or {}).get("by") == "rule"),
        "hop_lp_min": min(means),
        "hop_mismatch": float(any(mismatch(h.question, a) for h, a in zip(rnd.hops, rnd.hop_answers))),
        "hop_titled": float(bool(titled) and all(titled)),
    }


def round_features(run: Run, rnd: Round) -> dict[str, float]:
    """The gate's features of a settled round of ``run`` (see :data:`GATE_FEATURES`)."""
    question, answer = run.question, rnd.answer or ""
    evidence = rnd.evidence
    cited = [p for p in evidence if p.id in set(rnd.cited_ids)]
    text = _norm(" ".join(f"{p.title} {p.text}" for p in evidence))
    a = _norm(answer)
    opts = options(question)
    yes_no = a in ("yes", "no")
    scores = sorted((float(p.score) for p in evidence), reverse=True) + [0.0, 0.0, 0.0]
    conf = _confidence(rnd) or {}
    p_yes = rnd.read.p_yes if rnd.read is not None and rnd.action != "compare" and yes_no else None
    first = run.rounds[0].answer if run.rounds and rnd is not run.rounds[0] else None
    asked = set(words(question))
    return {
        "lp_mean": float(conf.get("mean", MISSING_LOGPROB)),
        "lp_min": float(conf.get("min", MISSING_LOGPROB)),
        "p_first": float(conf.get("first", math.exp(MISSING_LOGPROB))),
        "lp_missing": float(not conf),
        "answer_words": float(min(len(a.split()), 20)),
        "unknown": float(a in ("", "unknown")),
        "in_evidence": float(bool(a) and f" {a} " in f" {text} "),
        "in_cited": float(bool(a) and is_span(answer, cited)),
        "in_question": float(bool(a) and f" {a} " in f" {_norm(question)} "),
        "names_passage": float(any(names_title(answer, p) and not set(words(p.title)) <= asked for p in evidence)),
        "type_mismatch": float(mismatch(question, answer)),
        "form_comparison": float(run.form == "comparison"),
        "form_yesno": float(run.form == "yesno"),
        "option_miss": float(bool(opts) and not matches_option(a, opts)),
        "yesno_mismatch": float((run.form == "yesno") != yes_no),
        "yes_margin": abs(2 * p_yes - 1) if p_yes is not None else 0.0,
        "score_1": scores[0],
        "score_2": scores[1],
        "score_3": scores[2],
        "action_retrieve": float(rnd.action == "retrieve"),
        "action_compare": float(rnd.action == "compare"),
        "action_focus": float(rnd.action == "focus"),
        "by_code": float(rnd.how in ("code", "p_yes")),
        "agrees_draft": float(first is not None and same_answer(answer, first)),
        **_chain_features(rnd),
    }


def critic_features(critique: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The judge's extra features from a read critique (program.sharp.critic.read_critique), or None when the
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
    selector = getattr(config, "selector", None)
    if selector is not None:
        selector.check_fits(corpus_sha256, dataset)
