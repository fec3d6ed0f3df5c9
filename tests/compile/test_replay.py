"""Replay: a policy scored from one recording equals a live run of that policy, question by question."""

from __future__ import annotations

import json

import pytest
from toy_world import CORPUS

from optimize.evaluate import evaluate
from optimize.recording import check_reading, read_records, reading, reading_key, record, record_question
from optimize.replay import ReplayError, replay, score
from program.errors import ConfigError
from program.sharp.rounds import lookup_in
from program.tracing import Budget

TEXTS = lookup_in({p.id: p for p in CORPUS})

COMPARED = (
    "answer",
    "em",
    "f1",
    "all_gold",
    "retries",
    "stop_reason",
    "lm_calls",
    "prompt_tokens",
    "completion_tokens",
    "cost_by_role",
    "critic_points",
    "passage_ids",
)

# policies over the toy world's recording: when the critic reads, the thresholds, the repair orders, how many
# repairs, how the answer is chosen, and a budget
POLICIES = {
    "defaults": {},
    "critic off": {"ask_critic": "off"},
    "critic always": {"ask_critic": "always"},
    "band with a floor": {"ask_critic": "band", "critic_floor": 0.3, "accept_threshold": 0.9},
    "everything accepted": {"ask_critic": "off", "accept_threshold": 0.0},
    "nothing accepted, the last round": {"ask_critic": "always", "accept_threshold": 1.0, "choose": "last"},
    "no repair": {"max_repairs": 0},
    "one repair": {"max_repairs": 1, "ask_critic": "always"},
    "retrieval first": {"repair_comparison": ("retrieve", "compare"), "repair_yesno": ("retrieve",)},
    "comparisons only": {"repair_comparison": ("compare",), "repair_bridge": (), "ask_critic": "off"},
    "every repair": {"repair_bridge": ("focus", "retrieve"), "repair_comparison": ("compare", "retrieve"),
                     "repair_yesno": ("compare", "retrieve"), "focus_when": "rejected", "accept_threshold": 0.99},
    "focus when flagged": {"repair_bridge": ("focus",), "focus_when": "flagged", "ask_critic": "off"},
    "composer decides": {"compare_by": "composer", "ask_critic": "off"},
    "code settles everything": {"yes_threshold": 0.6, "yes_threshold_sub": 0.6, "option_form": "passage",
                                "force_option": True, "span_rule": "both"},
    "two lm calls": {"ask_critic": "always", "budget": Budget(max_lm_calls=2)},
    "300 tokens": {"ask_critic": "always", "focus_when": "rejected", "budget": Budget(max_lm_calls=None, max_tokens=300)},
}  # fmt: skip


def strip(trace):
    return [{k: v for k, v in s.items() if k != "seconds"} for s in trace]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_replay_equals_a_live_run_of_the_same_policy(world, toy_recording, name):
    examples, recs, _ = toy_recording
    config = world.small.replace(**POLICIES[name])
    live = evaluate(world.program(config), examples, progress=False)
    replayed = score(recs, examples, config, passages=TEXTS)
    for a, b in zip(live.rows, replayed.rows):
        assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}, (name, a["id"])
        assert strip(a["trace"]) == strip(b["trace"]), (name, a["id"])
    for key in ("em", "f1", "lm_calls_per_q", "retries_per_q", "critic_brier", "critic_over_trigger"):
        x, y = replayed.metrics[key], live.metrics[key]
        assert (x is None and y is None) or x == pytest.approx(y), key
    assert replayed.metrics["live_seconds_per_q"] > 0


def test_the_policies_reach_every_stop_reason_and_both_choices_of_the_answer(world, toy_recording):
    examples, recs, _ = toy_recording
    reasons, chosen = set(), set()
    for name in POLICIES:
        for row in score(recs, examples, world.small.replace(**POLICIES[name]), passages=TEXTS).rows:
            reasons.add(row["stop_reason"])
            pick = next(s for s in row["trace"] if s["role"] == "select")
            last = [s for s in row["trace"] if s["role"] == "judgement"][-1]
            chosen.add("last" if pick["round"] == last["round"] else "earlier")
    assert reasons == {
        "confident",
        "no_repair_left",
        "no_repair_for_form",
        "max_repairs",
        "budget_lm_calls",
        "budget_tokens",
    }
    assert chosen == {"last", "earlier"}


def test_the_recording_holds_every_round_each_critiqued_including_fallbacks_and_discarded_critiques(toy_recording):
    _, recs, _ = toy_recording
    forms = {r["form"] for r in recs.values()}
    assert forms == {"bridge", "comparison", "yesno"}
    for rec in recs.values():
        actions = [r["action"] for r in rec["rounds"]]  # an "incomplete" critique moves the retrieval repair first
        # every repair of the form, however many (a bridge's three: a policy's cap is a replay's choice)
        repairs = {"focus", "retrieve", "chain"} if rec["form"] == "bridge" else {"compare", "retrieve"}
        assert actions[0] == "draft" and len(actions) == 1 + len(repairs) and set(actions[1:]) == repairs
        assert rec["critiqued"] and rec["error"] is None
        for rnd in rec["rounds"]:
            answered = rnd["read"] is not None or rnd["values"]
            assert (rnd["critique"] is None) == (not answered)  # every answered round critiqued
            reads = [rnd["read"]] if rnd["read"] else rnd["values"]
            assert all(isinstance(p["id"], str) and "text" not in p for r in reads for p in r["evidence"])
        compared = next((r for r in rec["rounds"] if r["action"] == "compare" and r["values"]), None)
        if compared:  # every comparison composed too, its call apart, so a replay can take either path
            assert compared["read"] is not None and compared["compose_calls"]
    rounds = [r for rec in recs.values() for r in rec["rounds"]]
    assert any((r["critique"] or {}).get("critic_problem") for r in rounds)  # a discarded critique
    json.dumps(recs)  # plain JSON


def test_replay_needs_no_model_call(world, toy_recording):
    examples, recs, _ = toy_recording
    lms = world.lms()
    prog = world.program()
    world.assign(prog, lms)
    for name in POLICIES:
        score(recs, examples, world.small.replace(**POLICIES[name]), passages=TEXTS)
    assert all(lm.calls == 0 for lm in lms.values())


def test_a_recording_without_critiques_replays_only_policies_that_never_ask_the_critic(world):
    examples = world.examples()
    recs = record(world.program(), examples, critique=False)
    assert all(not r["critiqued"] and all(x["critique"] is None for x in r["rounds"]) for r in recs.values())
    off = world.small.replace(ask_critic="off")
    live = evaluate(world.program(off), examples, progress=False)
    assert [r["answer"] for r in score(recs, examples, off, passages=TEXTS).rows] == [r["answer"] for r in live.rows]
    with pytest.raises(ReplayError, match="asks the critic about a round the recording did not critique"):
        score(recs, examples, world.small.replace(ask_critic="always"))


def test_a_repair_the_recording_lacks_is_refused(world):
    (ex,) = world.examples()[:1]
    rec = record_question(world.program(), ex.question, actions=())
    assert [r["action"] for r in rec["rounds"]] == ["draft"]
    policy = world.small.replace(ask_critic="off", accept_threshold=1.0, repair_bridge=("retrieve",))
    with pytest.raises(ReplayError, match="runs the 'retrieve' repair, which the recording did not record"):
        replay(rec, policy)
    with pytest.raises(ReplayError, match="format 2"):
        replay({**rec, "format": 2}, world.small)


def test_a_recording_of_drafts_grows_into_one_of_every_repair_without_reading_a_draft_twice(world, tmp_path):
    examples = world.examples()
    path = tmp_path / "rec.jsonl"
    record(world.program(), examples, path=path, critique=False, actions=())
    lms = world.lms()
    prog = world.program()
    world.assign(prog, lms)
    recs = record(prog, examples, path=path, critique=False, passages=TEXTS)
    whole = [s for s in lms["generator"].rules.seen if s["question"] in {e.question for e in examples}]
    assert len(whole) == len(examples)  # one retrieval repair's re-read each: no draft read again
    assert all(len(r["rounds"]) == (4 if r["form"] == "bridge" else 3) for r in recs.values())  # a bridge's chain too
    off = world.small.replace(ask_critic="off", repair_bridge=("focus", "retrieve"), focus_when="rejected")
    live = evaluate(world.program(off), examples, progress=False)
    assert [r["answer"] for r in score(recs, examples, off, passages=TEXTS).rows] == [r["answer"] for r in live.rows]


def test_records_of_a_program_that_reads_otherwise_are_refused(world, toy_recording):
    _, recs, _ = toy_recording
    prog = world.program()
    check_reading(recs.values(), prog)  # the same reading
    # a policy setting does not change the reading; a reading setting or a prompt does, for the actions that
    # read it: sub_k changes the comparisons' and focused reads' reading, not the draft's
    assert reading(world.program(world.small.replace(accept_threshold=0.1, ask_critic="off"))) == reading(prog)
    wider = world.program(world.small.replace(sub_k=2))
    assert reading(wider, "draft") == reading(prog, "draft") and reading(wider, "compare") != reading(prog, "compare")
    french = world.program()
    french.generator.signature = french.generator.signature.with_instructions("Answer in French.")
    assert reading(french, "draft") != reading(prog, "draft") and reading(french, "focus") != reading(prog, "focus")
    for other in (wider, french):
        with pytest.raises(ConfigError, match="reads otherwise.*record again"):
            check_reading(recs.values(), other)
    check_reading([{"error": "LMUnavailableError: down"}], prog)  # a failed record has no reading to check
    examples = world.examples()
    assert reading_key(prog, examples) == reading_key(world.program(), examples)
    assert reading_key(prog, examples) != reading_key(prog, examples[:3])


def test_an_earlier_code_version_gives_the_stamp_a_migration_replaces_without_touching_the_current_one(world):
    from experiments.lab.migrations.compare_v2_to_v3 import stamps
    from optimize import recording

    prog = world.program()
    before, now = stamps(prog)
    assert now == recording.reading(prog, "compare") == recording.reading(prog, "compare", code_version=3)
    assert before == recording.reading(prog, "compare", code_version=2) != now
    assert recording.CODE_VERSIONS == {"compare": 3, "chain": 4}  # asking for version 2 changed nothing
    # the draft's reading has no code version: giving one is what marks an action's code as versioned
    assert recording.reading(prog, "draft", code_version=1) != recording.reading(prog, "draft")


def test_a_gzipped_recording_reads_as_its_plain_file_and_is_never_recorded_into(world, tmp_path, toy_recording):
    import gzip

    examples, _, _ = toy_recording
    plain = tmp_path / "rec.jsonl"
    record(world.program(), examples[:3], path=plain)
    packed = tmp_path / "rec.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_records(packed, examples[:3]) == read_records(plain, examples[:3])
    with pytest.raises(ConfigError, match="gzipped recording is read only"):
        record(world.program(), examples[:3], path=packed)


def test_recording_resumes_from_its_file(world, tmp_path, toy_recording):
    examples, _, _ = toy_recording
    path = tmp_path / "rec.jsonl"
    record(world.program(), examples[:4], path=path)
    with path.open("a") as fh:
        fh.write('{"id": "q7", "cut')  # a line cut by a kill
    lms = world.lms()
    prog = world.program()
    world.assign(prog, lms)
    recs = record(prog, examples, path=path)
    assert set(recs) == {ex.id for ex in examples}
    # only the missing questions ran: their generator calls, and no draft of the first four
    drafts = [s["question"] for s in lms["generator"].rules.seen if s["question"] in {e.question for e in examples}]
    assert set(drafts) == {e.question for e in examples[4:]}
    assert all(json.loads(line)["id"] for line in path.read_text().splitlines())  # the cut line is gone


def test_only_sharp_is_recorded(world):
    from program.systems.vanilla import VanillaRAG

    with pytest.raises(ConfigError, match="no repair loop"):
        record(VanillaRAG(world.retriever()), world.examples()[:1])


def down_critic():
    from doubles import RaisingLM

    from program.errors import LMUnavailableError

    return RaisingLM("critic", LMUnavailableError("cannot reach the critic's server"))


def test_a_question_whose_lm_failed_is_recorded_as_failed_and_recorded_again(world, tmp_path):
    examples = world.examples()[:3]
    path = tmp_path / "rec.jsonl"
    prog = world.program()
    prog.critic.lm = down = down_critic()
    recs = record(prog, examples, path=path)
    assert all(r["error"].startswith("LMUnavailableError") for r in recs.values()) and down.calls == 3
    scored = score(recs, examples, world.small, passages=TEXTS)
    assert scored.metrics["errors"] == 3 and all(r["stop_reason"] == "error" for r in scored.rows)

    lms = world.lms()
    working = world.program()
    world.assign(working, lms)
    again = record(working, examples, path=path)
    assert lms["critic"].calls > 0 and not any(r["error"] for r in again.values())
    assert score(again, examples, world.small, passages=TEXTS).metrics["errors"] == 0


def test_a_recording_stops_when_the_lm_keeps_failing(world, tmp_path):
    from program.errors import RunAbortedError

    prog = world.program()
    prog.critic.lm = down_critic()
    with pytest.raises(RunAbortedError, match="2 questions in a row failed"):
        record(prog, world.examples(), path=tmp_path / "rec.jsonl", max_failed_in_a_row=2)
    assert len((tmp_path / "rec.jsonl").read_text().splitlines()) == 2


def test_a_truncated_question_replays_with_its_note(world):
    """A question longer than max_question_chars is cut live (an "input" step notes it); its replay says so too."""
    config = world.small.replace(max_question_chars=50, ask_critic="off")
    question = world.examples()[0].question + " " + "padding " * 20
    rec = record_question(world.program(config), question)
    live = world.program(config)(question=question)
    replayed = replay(rec, config, TEXTS)
    assert rec["truncated"] and live.trace[0]["role"] == "input"
    assert (replayed.answer, replayed.stop_reason) == (live.answer, live.stop_reason)
    assert strip(replayed.trace) == strip(live.trace)
