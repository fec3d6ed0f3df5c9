"""Compile the critic on its own: critique states harvested from runs, labels from gold annotations.

1. :func:`harvest` runs the program over training questions and turns every critic step of its
   trace into a case: the question, the searches made so far and the evidence exactly as the
   critic saw it (rebuilt from the passages the retriever returned, which are logged on the way).
2. The label is derived from the gold annotations: "sufficient" exactly when every gold
   paragraph is in the critiqued evidence (:func:`optimize.metrics.evidence_complete`). Each case
   carries a complete gold critique (verdict, confidence, the missing gold titles as missing
   information and as suggested queries), which labeled demos show the critic.
3. :class:`CriticScore` rewards the right call (stop or search again, made as SHARP makes it at
   the program's confidence threshold) and a calibrated P(sufficient):
   ``0.5 * correct + 0.5 * (1 - Brier)``; its ``feedback`` says the same in words for GEPA.
4. The critic is compiled as :class:`CriticProgram` (one predictor, named ``critic`` so it keeps
   the critic's LM) and copied back into the full program with :func:`install_critic`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from typing import Any

import dspy

from optimize.compile import shared_retriever
from optimize.metrics import calibration, evidence_complete
from program.confidence import DEFAULT_CONFIDENCE_THRESHOLD as DEFAULT_THRESHOLD
from program.critique import critic_stops, read_critique
from program.errors import ConfigError
from program.evidence import format_evidence
from program.lm.failures import is_service_failure
from program.saved import without_lms
from program.sharp import SharpConfig
from program.steps import RECOVERABLE, adapter_settings, check_question
from program.types import Passage

log = logging.getLogger(__name__)

CRITIC_INPUTS = ("question", "sub_queries", "evidence")
# A labelled case is a complete critique, so an optimizer's labeled demos show the whole output: the
# right verdict, a high (not certain) confidence, and for a gap the missing gold paragraphs' titles
# as what is missing and what to search.
LABEL_CONFIDENCE = 0.9


class PassageLog:
    """A retriever wrapper that remembers every passage it returned, by id."""

    def __init__(self, retriever: Any):
        self.retriever = retriever
        self.by_id: dict[str, Passage] = {}

    def _keep(self, passages: list[Passage]) -> list[Passage]:
        for p in passages:
            self.by_id.setdefault(p.id, p)
        return passages

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self._keep(self.retriever.retrieve(query, k))

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [self._keep(ps) for ps in self.retriever.retrieve_many(queries, k)]


class CriticProgram(dspy.Module):
    """The critic alone, as a program an optimizer can compile.

    It calls the critic exactly as SHARP does: through ``adapter`` (SHARP's ``structured_adapter``)
    with ``lm_config`` (:meth:`program.sharp.SharpConfig.critic_lm_config`: the token cap, and logprobs when
    P(sufficient) is read from tokens), so the metric scores the prompts and the P(sufficient) the
    program acts on. :func:`critic_student` takes both from a program.
    """

    def __init__(self, critic: dspy.Module, adapter: str | None = None, lm_config: dict | None = None):
        super().__init__()
        self.critic = critic
        self.adapter = adapter
        self.lm_config = dict(lm_config or {})

    def forward(self, question: str, sub_queries: list[str], evidence: str) -> dspy.Prediction:
        extra = {"config": dict(self.lm_config)} if self.lm_config else {}
        with dspy.context(**adapter_settings(self.adapter)):
            return self.critic(question=question, sub_queries=sub_queries, evidence=evidence, **extra)


def critic_student(program: dspy.Module) -> CriticProgram:
    """A copy of ``program``'s critic (demos, instructions, LM) wrapped for compiling, called with the
    program's adapter and LM settings."""
    cfg = getattr(program, "config", None)
    if isinstance(cfg, SharpConfig):
        return CriticProgram(
            program.critic.deepcopy(), adapter=cfg.structured_adapter, lm_config=cfg.critic_lm_config()
        )
    return CriticProgram(program.critic.deepcopy())


def install_critic(program: dspy.Module, compiled: CriticProgram) -> dspy.Module:
    """Load the compiled critic's demos and instructions into ``program`` (in place); return it."""
    if type(program.critic) is not type(compiled.critic):
        raise ConfigError(
            f"the compiled critic is a {type(compiled.critic).__name__} but the program's is a "
            f"{type(program.critic).__name__}; compile with the same critic_reasoning setting"
        )
    lms = {name: pred.lm for name, pred in program.critic.named_predictors()}
    program.critic.load_state(without_lms(compiled.critic.dump_state()))
    for name, pred in program.critic.named_predictors():
        pred.lm = lms.get(name)
    return program


# ---- harvesting --------------------------------------------------------------------------------
def critique_cases(
    example: Any, prediction: Any, passages: dict[str, Passage], passage_chars: int
) -> list[dspy.Example]:
    """One case per critic step of ``prediction``'s trace, labelled from ``example``'s gold titles."""
    gold = list(getattr(example, "gold_titles", None) or [])
    if not gold:
        return []
    question, _ = check_question(example.question, 10**9)
    asked: list[str] = []
    cases = []
    for step in getattr(prediction, "trace", None) or []:
        if step.get("role") == "retriever":
            asked = list(dict.fromkeys(asked + list(step.get("queries") or [])))
        if step.get("role") != "critic" or step.get("verdict") is None or "evidence_ids" not in step:
            continue
        try:
            evidence = [passages[i] for i in step["evidence_ids"]]
        except KeyError as exc:
            log.warning("question %s: passage %s was not logged; critique skipped", getattr(example, "id", "?"), exc)
            continue
        titles = [p.title for p in evidence]
        label = evidence_complete(gold, titles)
        seen = {t.strip().lower() for t in titles}
        missing = [t for t in gold if t.strip().lower() not in seen]
        cases.append(
            dspy.Example(
                id=f"{getattr(example, 'id', '?')}#{step.get('round', len(cases))}",
                question_id=getattr(example, "id", None),
                question=question,
                sub_queries=list(asked),
                evidence=format_evidence(evidence, passage_chars),
                verdict="sufficient" if label else "insufficient",
                confidence=LABEL_CONFIDENCE,
                missing_information=[] if label else [f"the facts in the passage about {t}" for t in missing],
                suggested_queries=[] if label else list(missing),
                sufficient=label,
                gold_titles=gold,
                evidence_titles=titles,
                program_verdict=step.get("verdict"),
                program_confidence=step.get("confidence"),
                p_token=step.get("p_sufficient"),
                features=dict(step.get("features") or {}),
            ).with_inputs(*CRITIC_INPUTS)
        )
    return cases


def harvest(program: dspy.Module, examples: Iterable[Any], max_retries: int | None = None) -> list[dspy.Example]:
    """Run ``program``'s loop in explore mode (:meth:`program.sharp.SharpRAG.run`: it never stops on the
    critic, so every round up to ``max_retries`` is critiqued, default the program's retry cap) on each
    example and collect its critique states as labelled cases, each with the features the program's
    calibrator reads (``features``) and the critic's own P(sufficient) (``p_token``)."""
    if not hasattr(program, "critic") or not hasattr(program, "retriever") or not hasattr(program, "run"):
        raise ConfigError(f"{type(program).__name__} has no critic to compile; use --system sharp")
    from optimize.replay import record_question

    with shared_retriever(program):
        runner = program.deepcopy()
    runner.retriever = plog = PassageLog(program.retriever)
    chars = runner.config.passage_chars
    retries = runner.config.max_retries if max_retries is None else max_retries
    cases: list[dspy.Example] = []
    examples = list(examples)
    for i, ex in enumerate(examples, 1):
        try:
            rec = record_question(runner, ex.question, retries, answer_rounds=False)  # critiques need no answers
        except RECOVERABLE as exc:
            if is_service_failure(exc):  # the LM is down or failing: no critique to harvest from anything
                raise
            log.warning("question %s failed while harvesting critiques: %s", getattr(ex, "id", "?"), exc)
            continue
        trace = [*rec["head"]["steps"], *(s for r in rec["rounds"] for s in (r["retriever"], r["critic"]) if s)]
        found = critique_cases(ex, dspy.Prediction(trace=trace), plog.by_id, chars)
        cases += found
        log.info("harvested %d/%d questions: %d critiques (%d so far)", i, len(examples), len(found), len(cases))
    return cases


def label_counts(cases: Sequence[Any]) -> dict[str, int]:
    pos = sum(bool(c.sufficient) for c in cases)
    return {
        "cases": len(cases),
        "sufficient": pos,
        "insufficient": len(cases) - pos,
        "questions": len({c.question_id for c in cases}),
    }


def split_cases(cases: Sequence[Any], val_fraction: float = 0.3, seed: int = 0) -> tuple[list, list]:
    """Split by question (all critiques of one question on one side), seeded."""
    qids = sorted({c.question_id for c in cases}, key=str)
    random.Random(seed).shuffle(qids)
    n_val = round(len(qids) * val_fraction) if len(qids) > 1 else 0
    val_ids = set(qids[:n_val])
    return [c for c in cases if c.question_id not in val_ids], [c for c in cases if c.question_id in val_ids]


# ---- balanced demos ----------------------------------------------------------------------------
CRITIC_OUTPUTS = ("verdict", "confidence", "missing_information", "suggested_queries")


def balance_demos(critic: CriticProgram, cases: Sequence[Any]) -> list[str]:
    """Make every critic predictor's demos show both verdicts; return the ids of the cases added.

    A few-shot classifier copies the majority label of its demos (Zhao et al., 2021, "Calibrate
    before use"). An optimizer keeps the demos that scored well, and a critic that already leans
    one way scores well mostly on that side: its demos then all say "sufficient" (or all
    "insufficient") and the lean grows. For each verdict the demos lack, the first train case with
    that label (its complete gold critique) is added, and the demos are interleaved by verdict.
    """
    added: list[str] = []
    for _, pred in critic.named_predictors():
        demos = list(pred.demos)
        present = {_verdict_of(d) for d in demos}
        for label in ("sufficient", "insufficient"):
            if label in present:
                continue
            case = next((c for c in cases if c.verdict == label), None)
            if case is None:
                continue
            demos.append(dspy.Example(**{k: case[k] for k in CRITIC_INPUTS + CRITIC_OUTPUTS}))
            added.append(str(case.id))
        pred.demos = _interleave(demos)
    return added


def _verdict_of(demo: Any) -> Any:
    return demo.get("verdict")  # dspy.Example or a loaded state's dict


def _interleave(demos: list) -> list:
    """Demos alternated by verdict, each verdict's demos in their original order."""
    groups: dict[Any, list] = {}
    for d in demos:
        groups.setdefault(_verdict_of(d), []).append(d)
    out: list = []
    for rank in range(max((len(g) for g in groups.values()), default=0)):
        out.extend(g[rank] for g in groups.values() if rank < len(g))
    return out


# ---- metric ------------------------------------------------------------------------------------
def _fields_of(pred: Any) -> dict:
    if pred is None:
        return {}
    return pred.toDict() if hasattr(pred, "toDict") else dict(pred)


def read_critique_of(pred: Any) -> dict:
    """``pred`` read exactly as SHARP reads a critique (:func:`program.critique.read_critique`): token
    probabilities when the prediction carries logprobs, else the written verdict and confidence; a
    critique SHARP would discard is "insufficient" with P(sufficient) unknown."""
    mode = "token" if getattr(pred, "logprobs", None) is not None else "verbal"
    return read_critique(_fields_of(pred), pred is not None, getattr(pred, "logprobs", None), mode)


def read_verdict(pred: Any) -> tuple[str, float]:
    """The verdict and confidence the program records (invalid output: insufficient, 0.0; with token
    probabilities the confidence is the probability of the verdict written)."""
    crit = read_critique_of(pred)
    return crit["verdict"], crit["confidence"]


def read_p_sufficient(pred: Any) -> tuple[float, str]:
    """P(sufficient) as SHARP reads it, and which source it was ("token", "verbal", or "fallback" for
    a critique SHARP would discard: unknown)."""
    crit = read_critique_of(pred)
    return crit["p_sufficient"], crit["confidence_source"]


class CriticScore:
    """The critic metric at the program's stop threshold: 0.5 for the right call (stop exactly when
    every gold paragraph is in the evidence, as :func:`program.critique.critic_stops` decides at
    ``threshold``) + 0.5 * (1 - Brier) of P(sufficient) against the label; 0 for an output the
    program would discard."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD):
        self.threshold = threshold
        self.__name__ = f"critic_score@{threshold:g}"

    def score(self, crit: dict, sufficient: bool) -> float:
        """The score of a critique already read with :func:`read_critique_of`."""
        if crit["critic_problem"]:
            return 0.0
        right = critic_stops(crit, self.threshold) == sufficient
        return 0.5 * right + 0.5 * (1.0 - (crit["p_sufficient"] - float(sufficient)) ** 2)

    def __call__(self, example: Any, pred: Any, trace: Any = None) -> float:
        return self.score(read_critique_of(pred), bool(example.sufficient))

    def feedback(
        self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
    ) -> dspy.Prediction:
        """GEPA feedback metric for the critic: the score and what was wrong, in words."""
        crit = read_critique_of(pred)
        score = self.score(crit, bool(gold.sufficient))
        p, verdict = crit["p_sufficient"], crit["verdict"]
        seen = {t.strip().lower() for t in gold.evidence_titles}
        missing = [t for t in gold.gold_titles if t.strip().lower() not in seen]
        truth = (
            "the evidence holds every paragraph needed (" + ", ".join(repr(t) for t in gold.gold_titles) + ")"
            if gold.sufficient
            else "the evidence lacks " + ", ".join(repr(t) for t in missing)
        )
        if crit["critic_problem"]:
            said = (
                "The output was unusable (no valid verdict and 0-1 confidence, or 'sufficient' while listing "
                "missing facts), so the program treats it as 'insufficient'"
            )
        else:
            said = f"You said {verdict!r} with confidence {crit['confidence']:.2f} (P(sufficient) = {p:.2f})"
        if critic_stops(crit, self.threshold) == bool(gold.sufficient):
            judgement = "Right verdict." + ("" if abs(p - gold.sufficient) < 0.3 else " Be more confident.")
        elif gold.sufficient:
            judgement = "Over-triggered: this asks for another search although nothing is missing."
        else:
            judgement = "Under-triggered: this stops although a needed paragraph is missing; name it as missing."
        return dspy.Prediction(score=score, feedback=f"Score {score:.2f}. In truth {truth}. {said}. {judgement}")


critic_score = CriticScore()
critic_feedback = critic_score.feedback


def evaluate_critic(
    critic: CriticProgram, cases: Sequence[Any], threshold: float = DEFAULT_THRESHOLD, points: list | None = None
) -> dict:
    """Mean score plus calibration (accuracy, Brier, ECE, trigger rates) of ``critic`` on ``cases``, its
    calls made as SHARP makes them with ``confidence_threshold`` = ``threshold``."""
    metric = CriticScore(threshold)
    points = [] if points is None else points  # the caller's list gets one point per case, in order
    scores, errors = [], 0
    for i, case in enumerate(cases, 1):
        if i == 1 or i % 5 == 0 or i == len(cases):
            log.info("evaluating the critic: critique %d/%d", i, len(cases))
        try:
            pred = critic(**case.inputs())
        except RECOVERABLE as exc:
            if is_service_failure(exc):  # not the critic's answer: scoring its fallback would be false
                raise
            log.debug("critic failed on %s: %s", case.id, exc)
            pred, errors = None, errors + 1
        crit = read_critique_of(pred)
        stop = critic_stops(crit, threshold)
        scores.append(metric.score(crit, bool(case.sufficient)))
        points.append(
            {
                "p_sufficient": crit["p_sufficient"],
                "verdict": crit["verdict"],
                "label": bool(case.sufficient),
                "stop_call": stop,
                "action": "stop" if stop else "retry",
                "problem": crit["critic_problem"],
                "source": crit["confidence_source"],
            }
        )
    out = {"score": sum(scores) / len(scores) if scores else None, "errors": errors}
    out.update(calibration(points))
    return out
