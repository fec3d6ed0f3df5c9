"""Pure metrics over (example, prediction): answer EM/F1, retrieval, critic calibration, cost.

EM and F1 use the official HotpotQA normalization (lower-case, strip punctuation and articles,
collapse spaces; yes/no/noanswer get no partial credit), maxed over the answer and its aliases.
"""

from __future__ import annotations

import re
import string
import unicodedata
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

_SPECIAL = {"yes", "no", "noanswer"}
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    return _normalized(str(s))


@lru_cache(maxsize=65536)  # a replayed search scores the same answers under every policy
def _normalized(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _f1(prediction: str, gold: str) -> float:
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if (p in _SPECIAL or g in _SPECIAL) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def gold_answers(example: Any) -> list[str]:
    answers = [example.answer] + list(getattr(example, "answer_aliases", None) or [])
    return [a for a in dict.fromkeys(str(a) for a in answers) if a.strip()]


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Iterable[str]) -> float:
    return max((_f1(prediction, g) for g in golds), default=0.0)


def answer_em(example: Any, prediction: Any, trace: Any = None) -> float:
    """DSPy metric: exact match against the answer and its aliases."""
    return exact_match(getattr(prediction, "answer", "") or "", gold_answers(example))


def answer_f1(example: Any, prediction: Any, trace: Any = None) -> float:
    """DSPy metric: token F1 against the answer and its aliases (the best one)."""
    return f1_score(getattr(prediction, "answer", "") or "", gold_answers(example))


def _title(t: str) -> str:
    return unicodedata.normalize("NFC", str(t)).strip().lower()


def evidence_complete(gold_titles: Iterable[str], titles: Iterable[str]) -> bool:
    gold = {_title(t) for t in gold_titles}
    return bool(gold) and gold <= {_title(t) for t in titles}


def retrieval_scores(example: Any, prediction: Any) -> dict[str, float | None]:
    """Recall / precision / all-gold of the passages the generator saw, by gold titles."""
    gold = {_title(t) for t in getattr(example, "gold_titles", None) or []}
    seen = [_title(p.title if hasattr(p, "title") else p["title"]) for p in getattr(prediction, "passages", []) or []]
    if not gold:
        return {"recall": None, "precision": None, "all_gold": None}
    hits = gold & set(seen)
    return {
        "recall": len(hits) / len(gold),
        "precision": (sum(t in gold for t in seen) / len(seen)) if seen else 0.0,
        "all_gold": float(hits == gold),
    }


def critic_points(example: Any, prediction: Any) -> list[dict]:
    """One point per judged round of SHARP: the answer critic's P(right), the label (the round's answer is an
    exact match), and its call (``stop_call``: the draft was accepted)."""
    points = []
    for step in getattr(prediction, "trace", None) or []:
        if step.get("role") != "judgement" or step.get("p_right") is None:
            continue
        points.append(
            {
                "p": float(step["p_right"]),
                "source": step.get("source"),
                "verdict": step.get("verdict"),
                "label": bool(exact_match(step.get("answer") or "", gold_answers(example))),
                "action": step.get("action"),
                "stop_call": bool(step.get("accepted")),
            }
        )
    return points


def point_p(point: dict) -> float:
    """A critic point's probability: P(right) of the answer critic's points; the committed result files of the
    runs before it (experiments/results/hotpotqa-dev-200/sharp*.jsonl) hold the evidence critic's
    P(sufficient) under ``p_sufficient``, read alike so their reports stay as they were."""
    return float(point["p"] if "p" in point else point["p_sufficient"])


def calibration(points: list[dict], bins: int = 10) -> dict[str, float | None]:
    """The critic's calls (``stop_call``: the draft was accepted) and probabilities against the gold labels
    (the draft is right).

    ``verdict_accuracy``: share of right calls (stop exactly on a positive); ``over_trigger``: share of
    positives the critic sent to a repair; ``under_trigger``: share of negatives it let through;
    ``repair_rate``: share of points sent to a repair; Brier, ECE and AUROC of the probability.
    """
    if not points:
        return {
            k: None
            for k in (
                "verdict_accuracy",
                "brier",
                "ece",
                "auroc",
                "over_trigger",
                "under_trigger",
                "repair_rate",
                "n_critiques",
            )
        }
    n = len(points)
    correct = sum(p["stop_call"] == p["label"] for p in points)
    brier = sum((point_p(p) - float(p["label"])) ** 2 for p in points) / n
    ece = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [p for p in points if lo <= point_p(p) < hi or (b == bins - 1 and point_p(p) == 1.0)]
        if members:
            conf = sum(point_p(p) for p in members) / len(members)
            acc = sum(p["label"] for p in members) / len(members)
            ece += len(members) / n * abs(conf - acc)
    right = [p for p in points if p["label"]]
    wrong = [p for p in points if not p["label"]]
    return {
        "verdict_accuracy": correct / n,
        "brier": brier,
        "ece": ece,
        "auroc": auroc([point_p(p) for p in right], [point_p(p) for p in wrong]),
        "over_trigger": (sum(not p["stop_call"] for p in right) / len(right)) if right else None,
        "under_trigger": (sum(p["stop_call"] for p in wrong) / len(wrong)) if wrong else None,
        "repair_rate": sum(not p["stop_call"] for p in points) / n,
        "n_critiques": n,
    }


def auroc(positives: list[float], negatives: list[float]) -> float | None:
    """P(a random positive scores above a random negative), ties counting half; None without both.

    For the critic: whether *any* threshold on P(right) can separate right drafts from wrong ones (0.5: no
    threshold can), which accuracy, Brier and ECE do not say.
    """
    if not positives or not negatives:
        return None
    if any(v != v for v in (*positives, *negatives)):  # a NaN orders nothing: count the pairs one by one
        wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
        return wins / (len(positives) * len(negatives))
    # the same count as pair by pair, by sorting: each positive wins over the negatives below it and half of those
    # it ties (every term a multiple of 0.5, so the sum is exact and the value identical to the bit)
    ordered = sorted(negatives)
    wins = 0.0
    for p in positives:
        below, upto = bisect_left(ordered, p), bisect_right(ordered, p)
        wins += below + 0.5 * (upto - below)
    return wins / (len(positives) * len(negatives))


def question_row(example: Any, prediction: Any) -> dict:
    """Everything the reports need about one answered question, JSON-ready."""
    cost = getattr(prediction, "cost", None) or {}
    row = {
        "id": getattr(example, "id", None),
        "question": example.question,
        "type": getattr(example, "type", None),
        "gold": example.answer,
        "answer": getattr(prediction, "answer", ""),
        "em": answer_em(example, prediction),
        "f1": answer_f1(example, prediction),
        **retrieval_scores(example, prediction),
        "retries": getattr(prediction, "retries", 0),
        "stop_reason": getattr(prediction, "stop_reason", None),
        "lm_calls": cost.get("lm_calls", 0),
        "prompt_tokens": cost.get("prompt_tokens", 0),
        "completion_tokens": cost.get("completion_tokens", 0),
        "lm_seconds": cost.get("lm_seconds", 0.0),
        "cached_calls": cost.get("cached_calls", 0),
        "cost_by_role": cost.get("by_role", {}),
        "critic_points": critic_points(example, prediction),
        "passage_ids": [p.id for p in getattr(prediction, "passages", []) or []],
        "n_passages": len(getattr(prediction, "passages", []) or []),
        "trace": getattr(prediction, "trace", []),
        "error": None,
    }
    return row
