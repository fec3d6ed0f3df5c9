"""Replay: a policy scored from one recording equals a live run of that policy, question by question."""

from __future__ import annotations

import json

import pytest

from optimize.evaluate import evaluate
from optimize.replay import Policy, ReplayError, record, replay, score
from program.steps import Budget

COMPARED = (
    "answer",
    "em",
    "f1",
    "recall",
    "precision",
    "all_gold",
    "retries",
    "stop_reason",
    "lm_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_calls",
    "critic_points",
    "passage_ids",
)

POLICIES = [
    (0.5, 0, Budget()),
    (0.7, 1, Budget()),
    (0.85, 2, Budget()),
    (0.95, 3, Budget()),
    (0.0, 3, Budget()),
    (0.7, 3, Budget(max_lm_calls=2)),
    (0.95, 3, Budget(max_lm_calls=None, max_tokens=200)),
]


def strip(trace):
    return [{k: v for k, v in s.items() if k not in ("seconds",)} for s in trace]


@pytest.fixture
def recorded(world):
    examples = world.examples()
    return examples, record(world.program(), examples, max_retries=3)


@pytest.mark.parametrize("threshold,max_retries,budget", POLICIES)
def test_replay_equals_live_run(world, recorded, threshold, max_retries, budget):
    examples, recs = recorded
    config = world.small.replace(confidence_threshold=threshold, max_retries=max_retries, budget=budget)
    live = world.program(config)
    live_rows = evaluate(live, examples, progress=False).rows
    replayed = score(recs, examples, Policy.of(config))
    for a, b in zip(live_rows, replayed.rows):
        assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, a["id"]
        assert strip(a["trace"]) == strip(b["trace"]), a["id"]
    live_metrics = evaluate(world.program(config), examples, progress=False).metrics
    for key in ("em", "f1", "lm_calls_per_q", "retries_per_q", "critic_brier", "critic_over_trigger"):
        a, b = replayed.metrics[key], live_metrics[key]
        assert (a is None and b is None) or a == pytest.approx(b), key
    assert replayed.metrics["live_seconds_per_q"] > 0


def test_the_policies_cover_every_stop_reason(world, recorded):
    examples, recs = recorded
    reasons = set()
    for t, r, b in POLICIES:
        config = world.small.replace(confidence_threshold=t, max_retries=r, budget=b)
        reasons |= {row["stop_reason"] for row in score(recs, examples, Policy.of(config)).rows}
    assert reasons == {
        "sufficient",
        "max_retries",
        "no_new_queries",
        "no_new_passages",
        "budget_lm_calls",
        "budget_tokens",
    }


def test_replay_needs_no_model_calls(world, recorded):
    examples, recs = recorded
    lms = world.lms()
    prog = world.program()
    world.assign(prog, lms)
    score(recs, examples, Policy(0.8, 2))
    assert all(lm.calls == 0 for lm in lms.values())


def test_more_retries_than_recorded_is_refused(world):
    examples = world.examples()[:2]
    recs = record(world.program(), examples, max_retries=1)
    with pytest.raises(ReplayError, match="exceeds the 1 recorded"):
        replay(recs["q0"], Policy(0.7, 2))


def test_recording_resumes_from_its_file(world, tmp_path):
    examples = world.examples()
    path = tmp_path / "rec.jsonl"
    record(world.program(), examples[:4], max_retries=2, path=path)
    with path.open("a") as fh:
        fh.write('{"id": "q7", "cut')  # a line cut by a kill
    lms = world.lms()
    prog = world.program()
    world.assign(prog, lms)
    recs = record(prog, examples, max_retries=2, path=path)
    assert set(recs) == {ex.id for ex in examples}
    assert lms["planner"].calls == len(examples) - 4  # only the missing questions ran
    assert all(json.loads(line)["id"] for line in path.read_text().splitlines()[-5:])
    # a recording with fewer retries than asked is redone
    lms = world.lms()
    world.assign(prog, lms)
    record(prog, examples[:1], max_retries=3, path=path)
    assert lms["planner"].calls == 1


def test_only_sharp_is_recorded(world):
    from program.baselines import VanillaRAG
    from program.errors import ConfigError

    with pytest.raises(ConfigError, match="retry loop"):
        record(VanillaRAG(world.retriever()), world.examples()[:1], 1)


# Settings that change how the loop runs, not only when it stops: each recording replays to its live runs.
LOOP_CONFIGS = {
    "chat adapters": {"structured_adapter": "chat", "generator_adapter": "chat"},
    "reasoning on": {"critic_reasoning": True, "generator_reasoning": True},
    "another k schedule": {"k_schedule": (2, 3, 4, 5)},
    "bridge always": {"bridge": "always"},
    "bridge off": {"bridge": "off"},
    "round-robin evidence, no planner": {"evidence_order": "round_robin", "planner": False},
    "widening evidence, retries searched with the question": {
        "k_schedule": (2, 3, 4, 5),
        "evidence_cap": 5,
        "evidence_widens": True,
        "retry_with_question": True,
        "evidence_order": "score",
    },
}


@pytest.mark.parametrize("name", sorted(LOOP_CONFIGS))
def test_replay_equals_live_run_for_other_loop_settings(world, name):
    examples = world.examples()
    base = world.small.replace(**LOOP_CONFIGS[name])
    recs = record(world.program(base), examples, max_retries=3)
    for threshold, max_retries, budget in ((0.7, 3, Budget()), (0.95, 2, Budget()), (0.7, 3, Budget(max_lm_calls=3))):
        config = base.replace(confidence_threshold=threshold, max_retries=max_retries, budget=budget)
        live_rows = evaluate(world.program(config), examples, progress=False).rows
        replayed = score(recs, examples, Policy.of(config))
        for a, b in zip(live_rows, replayed.rows):
            assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, (name, a["id"])
            assert strip(a["trace"]) == strip(b["trace"]), (name, a["id"])
    steps = {s["role"] for r in recs.values() for rnd in r["rounds"] for s in rnd.get("query_steps", [])}
    assert ("bridge" in steps) == (base.bridge != "off"), steps  # the bridge ran (and replayed) where it may


def down_critic():
    from doubles import RaisingLM

    from program.errors import LMUnavailableError

    return RaisingLM("critic", LMUnavailableError("cannot reach the critic's server"))


def test_a_question_whose_lm_failed_is_recorded_as_failed_and_recorded_again(world, tmp_path):
    examples = world.examples()[:3]
    path = tmp_path / "rec.jsonl"
    prog = world.program()
    prog.critic.lm = down = down_critic()
    recs = record(prog, examples, max_retries=1, path=path)
    assert all(r["error"].startswith("LMUnavailableError") for r in recs.values()) and down.calls == 3
    scored = score(recs, examples, Policy(0.7, 1))
    assert scored.metrics["errors"] == 3 and all(r["stop_reason"] == "error" for r in scored.rows)

    lms = world.lms()
    working = world.program()
    world.assign(working, lms)
    again = record(working, examples, max_retries=1, path=path)
    assert lms["planner"].calls == 3 and not any(r["error"] for r in again.values())
    assert score(again, examples, Policy(0.7, 1)).metrics["errors"] == 0


def test_a_recording_stops_when_the_lm_keeps_failing(world, tmp_path):
    from optimize.evaluate import RunAbortedError

    prog = world.program()
    prog.critic.lm = down_critic()
    with pytest.raises(RunAbortedError, match="2 questions in a row failed"):
        record(prog, world.examples(), max_retries=1, path=tmp_path / "rec.jsonl", max_failed_in_a_row=2)
    assert len((tmp_path / "rec.jsonl").read_text().splitlines()) == 2
