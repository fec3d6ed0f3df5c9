"""Compile the hop planner (``PlanHops``, SharpRAG.hop_planner): its demos chosen by what its plans find.

A bridge the rules cannot plan (program/sharp/plans.py) is planned by the planner LM; its plan decides every
hop's search. The planner is compiled with DSPy's few-shot optimizers over:

* **demos** from train questions with a gold decomposition: MuSiQue's ``question_decomposition`` (later hops
  naming earlier answers "#1"; its "X >> relation" steps written as natural questions) and 2WikiMultihopQA's
  rule plans (their gold evidence triples agree with the rules' relations);
* **a plan metric** (:func:`plan_metric`), no reader call: 0 for a plan Python refuses (check_plan); else one
  half for a valid plan and one half times the share of the question's gold paragraphs the plan's searches
  find, each hop searched with the gold answers of the earlier hops written in for #1, #2 (MuSiQue's
  decomposition answers, 2Wiki's evidence objects; HotpotQA's bridge entity, the supporting title its question
  does not name). Query writing per hop is what it scores: DSPy's published optimizer gains on multi-hop search
  come from there. :func:`plan_feedback` is the same score with GEPA's textual feedback (why Python refused the
  plan, else which gold paragraphs its hops' searches missed, each hop as searched).

The compiled planner's state goes back into the program (:func:`install`); the program's other predictors
are untouched. Gold fields are read here, on train questions only: the program sees only the question.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dspy

from program.reading.parsing import items
from program.sharp.forms import question_form
from program.sharp.plans import REF, check_plan, rule_plan, substitute
from program.sharp.spans import words
from program.tracing import adapter_settings

__all__ = [
    "PlannerStudent",
    "demo_examples",
    "gold_answers_for",
    "install",
    "natural_hop",
    "plan_feedback",
    "plan_metric",
    "plannable",
    "planner_examples",
    "score_plans",
]

# MuSiQue's "X >> relation" steps (Wikidata properties) as the natural questions the reader reads well
_RELATION_QUESTIONS = {
    "performer": "Who performed {x}?",
    "composer": "Who composed {x}?",
    "author": "Who wrote {x}?",
    "director": "Who directed {x}?",
    "producer": "Who produced {x}?",
    "publisher": "Who published {x}?",
    "creator": "Who created {x}?",
    "founded by": "Who founded {x}?",
    "developer": "Who developed {x}?",
    "manufacturer": "Who made {x}?",
    "record label": "What record label released {x}?",
    "country": "Which country is {x} in?",
    "country of citizenship": "Which country was {x} from?",
    "country of origin": "Which country does {x} come from?",
    "located in the administrative territorial entity": "Where is {x} located?",
    "location": "Where is {x} located?",
    "place of birth": "Where was {x} born?",
    "place of death": "Where did {x} die?",
    "date of birth": "When was {x} born?",
    "date of death": "When did {x} die?",
    "educated at": "Where did {x} study?",
    "employer": "Where did {x} work?",
    "spouse": "Who was the spouse of {x}?",
    "father": "Who was the father of {x}?",
    "mother": "Who was the mother of {x}?",
    "child": "Who was the child of {x}?",
    "member of sports team": "Which team did {x} play for?",
    "part of": "What is {x} part of?",
    "continent": "Which continent is {x} on?",
    "capital": "What is the capital of {x}?",
    "headquarters location": "Where is {x} headquartered?",
    "owned by": "Who owns {x}?",
    "parent organization": "What is the parent organization of {x}?",
}


def _relation_of(step: str) -> str | None:
    """The known relation an evidence triple's hop starts with ("place of birth of #1": data/formats.py
    evidence_hops, a dataset folder's ``evidences``), the longest that fits; None where none does."""
    cuts = [m.start() for m in re.finditer(" of ", step)]
    return next((step[:i] for i in reversed(cuts) if step[:i].lower() in _RELATION_QUESTIONS), None)


def natural_hop(step: str) -> str:
    """A MuSiQue decomposition step as a natural question ("Brand >> author" -> "Who wrote Brand?"), as is an
    evidence triple's ("place of birth of #1" -> "Where was #1 born?") where its relation is a known one; a step
    already written as a question is kept, its spacing mended ("#1 ?" -> "#1?")."""
    step = " ".join(step.split())
    if ">>" in step:
        subject, relation = (part.strip() for part in step.split(">>", 1))
        template = _RELATION_QUESTIONS.get(relation.lower(), "What is the " + relation + " of {x}?")
        step = template.format(x=subject)
    elif (relation := _relation_of(step)) is not None:
        step = _RELATION_QUESTIONS[relation.lower()].format(x=step[len(relation) + 4 :])
    step = re.sub(r"\s+\?", "?", step)
    return step[0].upper() + step[1:] if step else step


def _demo_hops(ex: Any) -> list[str] | None:
    """A train question's plan for a demo: its rule plan, else its gold decomposition (natural questions), when
    that is a chain this loop runs (two to four hops, each later one naming an earlier answer)."""
    ruled = rule_plan(ex.question)
    if ruled is not None:
        return list(ruled.hops)
    gold = [natural_hop(h) for h, _ in getattr(ex, "gold_hops", None) or []]
    if gold and check_plan(gold, ex.question) is None:
        return gold
    return None


def demo_examples(examples: Iterable[Any]) -> list[dspy.Example]:
    """Planner demos (question -> hops) from train questions that have a gold or rule plan (MuSiQue, 2Wiki)."""
    out = []
    for ex in examples:
        hops = _demo_hops(ex)
        if hops is not None:
            out.append(_planner_example(ex, hops))
    return out


def plannable(examples: Iterable[Any]) -> list[Any]:
    """The bridges the planner LM plans (no rule plan fits): what its plans are scored on."""
    return [ex for ex in examples if question_form(ex.question) == "bridge" and rule_plan(ex.question) is None]


def _planner_example(ex: Any, hops: Sequence[str] | None = None) -> dspy.Example:
    fields = {
        "question": ex.question,
        "gold_titles": list(getattr(ex, "gold_titles", None) or []),
        "gold_hops": [tuple(h) for h in getattr(ex, "gold_hops", None) or []],
        "id": getattr(ex, "id", None),
    }
    if hops is not None:
        fields["hops"] = list(hops)
    return dspy.Example(**fields).with_inputs("question")


def planner_examples(examples: Iterable[Any]) -> list[dspy.Example]:
    """Train questions as the planner's examples (question in; gold titles and hops kept for the metric)."""
    return [_planner_example(ex) for ex in examples]


def gold_answers_for(ex: Any, n_hops: int) -> list[str] | None:
    """What to write in for #1 .. #(n-1) when a plan is scored: the gold hop answers (MuSiQue, 2Wiki), else for a
    two-hop plan the bridge entity (the gold title the question does not name: HotpotQA); None when unknown."""
    gold = [a for _, a in getattr(ex, "gold_hops", None) or []]
    if len(gold) >= n_hops - 1 and gold:
        return gold[: n_hops - 1]
    if n_hops == 2:
        asked = set(words(ex.question))
        unnamed = [
            t for t in getattr(ex, "gold_titles", None) or [] if not set(words(re.sub(r"\(.*?\)", "", t))) <= asked
        ]
        if len(unnamed) == 1:
            return [re.sub(r"\s*\(.*?\)\s*$", "", unnamed[0])]
    return None


def plan_metric(search: Callable[[str, int], list] | None = None, k: int = 3) -> Callable[..., float]:
    """The planner's metric: 0 for a refused plan; else 1/2 for a valid plan plus 1/2 times the share of the
    gold paragraphs its hops' searches find, the gold answers written in (:func:`gold_answers_for`); without a
    ``search`` (or gold), a valid plan of the gold decomposition's length scores 1."""

    def metric(example: Any, prediction: Any, trace: Any = None) -> float:
        hops = items(getattr(prediction, "hops", None))
        if check_plan(hops, example.question) is not None:
            return 0.0
        gold_hops = list(getattr(example, "gold_hops", None) or [])
        answers = gold_answers_for(example, len(hops))
        titles = set(getattr(example, "gold_titles", None) or [])
        if search is None or not titles or answers is None:
            return 1.0 if not gold_hops or len(gold_hops) == len(hops) else 0.5
        found = {p.title for hop in hops for p in search(_written(hop, answers), k)}
        return 0.5 + 0.5 * len(titles & found) / len(titles)

    return metric


def plan_feedback(search: Callable[[str, int], list] | None = None, k: int = 3) -> Callable[..., dspy.Prediction]:
    """:func:`plan_metric` with GEPA's textual feedback (its signature: ``(gold, pred, trace, pred_name,
    pred_trace)``): why Python refused the plan, else which gold paragraphs its hops' searches missed (each hop
    as searched, the gold answers written in) and, where the question has one, the gold decomposition."""
    score_of = plan_metric(search, k)

    def metric(example: Any, prediction: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None):
        score = score_of(example, prediction)
        return dspy.Prediction(score=score, feedback=_plan_notes(example, prediction, search, k))

    return metric


def _plan_notes(example: Any, prediction: Any, search: Callable[[str, int], list] | None, k: int) -> str:
    hops = items(getattr(prediction, "hops", None))
    gold = [natural_hop(h) for h, _ in getattr(example, "gold_hops", None) or []]
    shown = (
        f" A plan of this question that works: {gold}." if gold and check_plan(gold, example.question) is None else ""
    )
    why = check_plan(hops, example.question)
    if why is not None:
        return (
            f"The plan {hops} was refused: {why}. A plan is 2 to 4 single questions, one fact each; hop 1 asks "
            f"about something the question names; each later hop names an earlier hop's answer as #1, #2.{shown}"
        )
    titles = list(getattr(example, "gold_titles", None) or [])
    answers = gold_answers_for(example, len(hops))
    if search is None or not titles or answers is None:
        return f"The plan is valid ({len(hops)} hops).{shown}"
    searched = {_written(hop, answers): [p.title for p in search(_written(hop, answers), k)] for hop in hops}
    found = {t for got in searched.values() for t in got}
    missing = [t for t in titles if t not in found]
    if not missing:
        return "The plan is valid and its hops' searches found every paragraph the answer needs."
    asked = "; ".join(f"{q!r} found {got}" for q, got in searched.items())
    return (
        f"The plan is valid, but searched with the right earlier answers written in ({asked}) its hops never "
        f"found the paragraph(s) {missing}: a hop should ask about the entity each of them is about.{shown}"
    )


def _written(hop: str, answers: Sequence[str]) -> str:
    """``hop`` with the gold answers written in; a reference past them is left as it is."""
    refs = [int(n) for n in REF.findall(hop)]
    return substitute(hop, answers) if all(1 <= n <= len(answers) for n in refs) else hop


class PlannerStudent(dspy.Module):
    """The hop planner alone (a copy of the program's), as a module DSPy's optimizers compile; it calls the
    planner as the program does (its adapter and token cap: ``config``, the program's SharpConfig)."""

    ROLE_MAP = {"hop_planner": "planner"}

    def __init__(self, hop_planner: dspy.Predict, config: Any = None):
        super().__init__()
        self.hop_planner = hop_planner.deepcopy()
        self.adapter = getattr(config, "structured_adapter", "json")
        self.max_tokens = getattr(config, "planner_max_tokens", 160)

    def forward(self, question: str) -> dspy.Prediction:
        with dspy.context(**adapter_settings(self.adapter)):
            pred = self.hop_planner(question=question, config={"max_tokens": self.max_tokens})
        return dspy.Prediction(hops=items(getattr(pred, "hops", None)))


def install(program: Any, compiled: PlannerStudent) -> list[str]:
    """Give ``program`` the compiled planner's instructions and demos, each demo cut to the signature's fields
    (question and hops: no gold field of its train question enters the program); its other predictors stay as
    they were. Returns the demos' train question ids (what a train measurement of the program leaves out)."""
    demos = list(compiled.hop_planner.demos)
    program.hop_planner.signature = compiled.hop_planner.signature
    program.hop_planner.demos = [dspy.Example(question=d["question"], hops=list(d["hops"])) for d in demos]
    return [str(d["id"]) for d in demos if d.get("id") is not None]


def score_plans(student: PlannerStudent, examples: Sequence[Any], metric: Callable[..., float]) -> dict[str, Any]:
    """The planner's plans of ``examples``: the mean metric, the share Python accepts, hops a plan."""
    scores, valid, lengths = [], 0, []
    for ex in examples:
        pred = student(question=ex.question)
        hops = items(pred.hops)
        scores.append(metric(ex, pred))
        if check_plan(hops, ex.question) is None:
            valid += 1
            lengths.append(len(hops))
    n = len(examples) or 1
    return {"questions": len(examples), "metric": round(sum(scores) / n, 4), "valid": round(valid / n, 4),
            "hops_per_plan": round(sum(lengths) / len(lengths), 3) if lengths else None}  # fmt: skip
