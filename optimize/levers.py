"""Levers kept by what they add on the tuning questions, not by a search over all of them at once.

A search over every setting (optimize/policy_search.py) finds the policy that scores best on its tuning questions,
and on HotpotQA it did not hold on held-out ones: settings that added one or two questions by chance were
kept with those that pay. Here each lever is measured alone against the neutral program (the ranked read,
no rule of code over its answer, no repair), with a paired bootstrap CI over the tuning questions, and kept
only where the CI's lower end is above zero; the program is the neutral one with every kept lever (of two
alternatives of the same setting, the one that adds more). Every score is a replay of one recording: no LM
call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optimize import replay
from optimize.stats import paired_bootstrap
from program.sharp.policy import SharpConfig, neutral_policy
from program.sharp.rounds import PassageLookup, titles_only

# the ranked read as the reader wrote it; a repair, where a lever adds one, runs after every draft of its form
# and answers when it has an answer (choose "last"): what the repair adds, not what a gate makes of it
NEUTRAL: dict[str, Any] = neutral_policy()


@dataclass(frozen=True)
class Lever:
    """One lever: its ``name``, the ``setting`` it decides (alternatives share one) and its config overrides."""

    name: str
    setting: str
    overrides: Mapping[str, Any]
    needs: str | None = None  # the recorded action it replays (None: a rule over the draft)


# the yes/no thresholds offered as alternatives of their setting where no tuned value is taken (a cross-fit
# chooses them in each fold; a tuned program's values were chosen on questions a fold may hold out)
THRESHOLDS = (0.6, 0.7, 0.8, 0.9)
# the draft's P(right) (the program's gate) below which a bridge is chained, where the chain is routed
CHAIN_ROUTES = (0.3, 0.5, 0.7)
# hop 1's first-token probability at or below which the chain carries its second answer (the beam; 1.0: always)
BEAM_ROUTES = (0.5, 1.0)


def levers(tuned: SharpConfig, thresholds: Sequence[float] | None = None) -> list[Lever]:
    """Every lever, the rules at ``tuned``'s own values where it has them (what its tune chose); with
    ``thresholds``, each yes/no rule once per threshold instead (alternatives of one setting)."""
    yes = tuned.yes_threshold if tuned.yes_threshold is not None else 0.85
    sub = tuned.yes_threshold_sub if tuned.yes_threshold_sub is not None else 0.85
    ys, subs = (tuple(thresholds), tuple(thresholds)) if thresholds is not None else ((yes,), (sub,))
    if not ys or any(not 0.0 < t < 1.0 for t in ys):
        raise ValueError(f"yes/no thresholds must lie strictly between 0 and 1, got {list(ys)}")
    return [
        *(Lever(f"yes/no from P(yes) >= {t}", "yes_threshold", {"yes_threshold": t}) for t in ys),
        Lever("option as its passage writes it", "option_form", {"option_form": "passage"}),
        Lever("option forced", "force_option", {"force_option": True}),
        Lever("span: the passage's name", "span_rule", {"span_rule": "name"}),
        Lever("span: the closest span", "span_rule", {"span_rule": "span"}),
        Lever("span: name, then closest span", "span_rule", {"span_rule": "both"}),
        Lever("place: its first part ('Boston' for 'Boston, Massachusetts')", "place_rule", {"place_rule": "first"}),
        Lever("comparisons read per option, decided in code", "repair_comparison",
              {"repair_comparison": ("compare",), "compare_by": "code"}, "compare"),
        Lever("yes/no checked per entity, combined in code", "repair_yesno",
              {"repair_yesno": ("compare",), "compare_by": "code"}, "compare"),
        *(Lever(f"yes/no checked per entity, each from P(yes) >= {t}", "repair_yesno",
                {"repair_yesno": ("compare",), "compare_by": "code", "yes_threshold_sub": t}, "compare")
          for t in subs),
        Lever("bridges: a focused read of a flagged draft", "repair_bridge", {"repair_bridge": ("focus",)}, "focus"),
        Lever("bridges: re-retrieval", "repair_bridge", {"repair_bridge": ("retrieve",)}, "retrieve"),
        Lever("comparisons: re-retrieval", "repair_comparison", {"repair_comparison": ("retrieve",)}, "retrieve"),
        Lever("bridges: the chain of single hops", "repair_bridge", {"repair_bridge": ("chain",)}, "chain"),
        Lever("bridges: the chain, the question read over its hops' passages", "repair_bridge",
              {"repair_bridge": ("chain",), "chain_answer": "union"}, "chain"),
        *(Lever(f"bridges: the chain where the draft's P(right) < {t}", "repair_bridge",
                {"repair_bridge": ("chain",), "accept_threshold": t}, "chain") for t in CHAIN_ROUTES),
        *(Lever(f"bridges: the chain, hop 1's second answer carried where its P <= {t}", "repair_bridge",
                {"repair_bridge": ("chain",), "chain_answer": "hop", "chain_beam": t}, "chain") for t in BEAM_ROUTES),
    ]  # fmt: skip


def shown(name: str, config: SharpConfig) -> bool:
    """Whether a kept program's setting ``name`` is one its lever choice decides (a lever study's "kept
    config"): the neutral policy's settings, how a comparison is decided, how a chain answers where it runs."""
    return name in NEUTRAL or name == "compare_by" or (name == "chain_answer" and "chain" in config.repair_bridge)


def recorded_actions(records: Mapping[str, dict], examples: Sequence[Any]) -> set[str]:
    """The actions the recording holds a round of, for these questions."""
    return {r["action"] for ex in examples for r in records[ex.id].get("rounds") or []}


def replayable(
    records: Mapping[str, dict],
    examples: Sequence[Any],
    base: SharpConfig,
    candidates: Sequence[Lever],
    passages: PassageLookup = titles_only,
    seed: int = 0,
) -> tuple[list[Lever], dict[str, str]]:
    """The ``candidates`` whose every round the recording holds for ``examples`` (a lever that reaches a repair
    recorded for some questions only, e.g. re-retrieval recorded for a comparison but no bridge, would stop a
    replay), and why each other one is not (its name -> the replay's error)."""
    from program.sharp.rounds import ReplayError

    neutral = base.replace(**NEUTRAL)
    kept, refused = [], {}
    for lever in candidates:
        try:
            replay.score(records, examples, neutral.replace(**lever.overrides), seed, passages, intervals=False)
        except ReplayError as exc:
            refused[lever.name] = str(exc)
        else:
            kept.append(lever)
    return kept, refused


@dataclass
class Effect:
    """A lever's EM difference against the neutral program: [diff, CI low, CI high], its LM calls and its
    recorded seconds a question."""

    lever: Lever
    delta_em: list[float] | None
    lm_calls_per_q: float
    seconds_per_q: float
    em: float
    per_question: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def pays(self) -> bool:
        return self.delta_em is not None and self.delta_em[1] > 0


def scores(records, examples, config, passages, seed) -> tuple[dict[str, float], dict[str, float]]:
    """EM per question id and the aggregate metrics of ``config`` replayed over ``examples``."""
    result = replay.score(records, examples, config, seed, passages, intervals=False)
    return {r["id"]: float(r["em"]) for r in result.rows}, dict(result.metrics)


def measure(
    records: Mapping[str, dict],
    examples: Sequence[Any],
    base: SharpConfig,
    candidates: Sequence[Lever],
    passages: PassageLookup = titles_only,
    seed: int = 0,
) -> tuple[dict[str, Any], list[Effect]]:
    """The neutral program's scores (``base`` with :data:`NEUTRAL`) and each lever's effect over it."""
    neutral = base.replace(**NEUTRAL)
    em0, m0 = scores(records, examples, neutral, passages, seed)
    effects = []
    for lever in candidates:
        em, m = scores(records, examples, neutral.replace(**lever.overrides), passages, seed)
        d = paired_bootstrap(em, em0, seed=seed)
        delta = [round(d["diff"], 4), round(d["ci"][0], 4), round(d["ci"][1], 4)] if d else None
        calls, seconds = round(m["lm_calls_per_q"], 3), round(m["live_seconds_per_q"], 2)
        effects.append(Effect(lever, delta, calls, seconds, round(m["em"], 4), em))
    neutral_row = {"em": round(m0["em"], 4), "lm_calls_per_q": round(m0["lm_calls_per_q"], 3),
                   "seconds_per_q": round(m0["live_seconds_per_q"], 2)}  # fmt: skip
    return neutral_row, effects


def select(effects: Sequence[Effect]) -> list[Lever]:
    """The levers that pay (CI above zero), one per setting: the one that adds most."""
    best: dict[str, Effect] = {}
    for e in effects:
        if e.pays and (e.lever.setting not in best or e.delta_em[0] > best[e.lever.setting].delta_em[0]):  # type: ignore[index]
            best[e.lever.setting] = e
    return [e.lever for e in effects if best.get(e.lever.setting) is e]


def combine(base: SharpConfig, kept: Sequence[Lever]) -> SharpConfig:
    """``base`` with :data:`NEUTRAL` and every kept lever's overrides (settings do not overlap: one lever
    each)."""
    over: dict[str, Any] = dict(NEUTRAL)
    for lever in kept:
        over.update(lever.overrides)
    return base.replace(**over)


@dataclass
class CrossFit:
    """What choosing levers by :func:`select` adds, every question scored by the levers chosen on the folds
    that do not hold it: per question, the chosen program's EM (``em``) and the neutral one's (``em0``); per
    fold, its questions and the levers chosen without them; the chosen programs' LM calls and recorded
    seconds a question."""

    folds: list[dict[str, Any]]
    em: dict[str, float]
    em0: dict[str, float]
    lm_calls_per_q: float
    seconds_per_q: float


def crossfit(
    records: Mapping[str, dict],
    examples: Sequence[Any],
    base: SharpConfig,
    candidates: Sequence[Lever],
    k: int = 5,
    passages: PassageLookup = titles_only,
    seed: int = 0,
) -> CrossFit:
    """Cross-fitted lever selection: ``examples`` dealt into ``k`` folds (every k-th question: the examples
    are in seeded positions already); for each fold the levers are measured and kept on the others and the
    kept program scores the fold. Every question serves once as held out, so the estimate of what the
    procedure adds rests on all of them, not on one held-out slice."""
    if not 2 <= k <= len(examples):
        raise ValueError(f"a cross-fit needs 2 <= folds <= questions, got {k} folds over {len(examples)} questions")
    folds = [list(examples[i::k]) for i in range(k)]
    em: dict[str, float] = {}
    rows, calls, seconds = [], 0.0, 0.0
    for i, held in enumerate(folds):
        fit = [ex for j, fold in enumerate(folds) if j != i for ex in fold]
        kept = select(measure(records, fit, base, candidates, passages, seed)[1])
        got, m = scores(records, held, combine(base, kept), passages, seed)
        em.update(got)
        calls += m["lm_calls_per_q"] * len(held)
        seconds += m["live_seconds_per_q"] * len(held)
        rows.append({"questions": len(held), "kept": [lever.name for lever in kept], "em": round(m["em"], 4)})
    n = len(examples)
    em0 = scores(records, examples, base.replace(**NEUTRAL), passages, seed)[0]  # a replay is per question
    return CrossFit(rows, em, em0, round(calls / n, 3), round(seconds / n, 2))
