"""SHARP's loop with scripted LMs: which rounds ran, which LM calls and searches they made, and why it stopped."""

from __future__ import annotations

import pytest
from doubles import FieldLM, GarbageLM, KeywordRetriever, ScriptedLM, assign
from toy_world import CORPUS

from program.errors import ConfigError, QuestionError
from program.sharp import UNCALIBRATED_P, SharpConfig, SharpRAG, next_step, p_right, select, wants_critic
from program.steps import Budget, traced

BRIDGE = "What nationality is the director of Pulp Fiction?"
CHOICE = "Which director is Polish, Quentin Tarantino or Krzysztof Kieslowski?"
SUBS = ["What nationality is Quentin Tarantino?", "What nationality is Krzysztof Kieslowski?"]
SURE, HALF, UNSURE, LOST = [-0.05], [-0.6931], [-1.0], [-2.0]  # P(answer) 0.95, 0.5, 0.37, 0.14


def reply(answer, lps=SURE):
    """A generator's (or composer's) reply whose answer tokens have log-probabilities ``lps``."""
    out = {"answer": answer, "supporting_passages": [1], "_logprobs": {"answer": lps}}
    return out if lps is not None else {k: v for k, v in out.items() if k != "_logprobs"}


def crit(verdict, p=0.9, missing=()):
    """A critique whose verdict token carries probability ``p`` (the rest split between the others)."""
    others = [v for v in ("supported", "unsupported", "incomplete") if v != verdict]
    probs = {verdict: p, **{v: (1 - p) / 2 for v in others}}
    return {"verdict": verdict, "confidence": p, "missing_information": list(missing), "suggested_queries": [],
            "_logprobs": {"verdict": probs}}  # fmt: skip


def by_question(role, replies):
    """An LM answering by the prompt's question: one reply, or a list of replies given in turn (the last one
    repeats)."""
    queue = {q: list(r) if isinstance(r, list) else [r] for q, r in replies.items()}

    def rule(fields):
        todo = queue[fields["question"]]
        return todo.pop(0) if len(todo) > 1 else todo[0]

    return FieldLM(role, rule)


def sharp(generator, config=None, critic=None, planner=None, composer=None):
    retriever = KeywordRetriever(CORPUS)
    prog = SharpRAG(retriever, config or SharpConfig(critic="off"))
    lms = {
        "planner": planner or FieldLM("planner", lambda f: {"sub_questions": list(SUBS)}),
        "critic": critic or FieldLM("critic", lambda f: crit("unsupported")),
        "generator": generator,
        "composer": composer or FieldLM("composer", lambda f: reply("Krzysztof Kieslowski", HALF)),
    }
    assign(prog, lms)
    return prog, lms, retriever


def steps(pred, role):
    return [s for s in pred.trace if s["role"] == role]


def rounds(pred):
    return [(s["action"], s["answer"]) for s in steps(pred, "judgement")]


# ---- the draft ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("critic", ["off", "band"])
def test_a_confident_draft_ends_the_loop_after_one_lm_call(critic):
    prog, lms, retriever = sharp(by_question("generator", {BRIDGE: reply("American")}), SharpConfig(critic=critic))
    pred = prog(question=BRIDGE)
    assert pred.answer == "American" and pred.stop_reason == "confident" and pred.retries == 0
    assert pred.cost["lm_calls"] == 1 and lms["critic"].calls == 0 and lms["planner"].calls == 0
    assert retriever.queries == [(BRIDGE, 3)]  # the question, at k_schedule[0]
    assert [s["role"] for s in pred.trace] == ["retriever", "generator", "judgement", "select"]
    (judged,) = steps(pred, "judgement")
    assert judged["p_gate"] == judged["p_right"] == pytest.approx(0.9512, abs=1e-4) and judged["source"] == "gate"
    assert judged["accepted"] and steps(pred, "generator")[0]["answer_confidence"]["mean"] == pytest.approx(-0.05)
    assert lms["generator"].rules.configs[0].logprobs is not None  # the draft asks for its tokens' probabilities


def test_critic_always_reads_even_a_confident_draft_and_its_verdict_decides():
    critic = FieldLM("critic", lambda f: crit("supported", 0.85))
    prog, lms, _ = sharp(by_question("generator", {BRIDGE: reply("American")}), SharpConfig(critic="always"), critic)
    pred = prog(question=BRIDGE)
    assert lms["critic"].calls == 1 and pred.cost["lm_calls"] == 2
    assert lms["critic"].rules.seen[0]["draft_answer"] == "American"  # the critic reads the draft
    (judged,) = steps(pred, "judgement")
    assert (judged["verdict"], judged["source"], judged["p_right"]) == ("supported", "critic", pytest.approx(0.85))
    assert pred.stop_reason == "confident"


@pytest.mark.parametrize(
    "lps,asked",
    [(SURE, False), (HALF, True), (LOST, False)],
    ids=["above the threshold", "in the band", "below the floor"],
)
def test_the_critic_reads_only_drafts_whose_gate_probability_lies_in_its_band(lps, asked):
    generator = by_question("generator", {BRIDGE: [reply("Quentin Tarantino", lps), reply("American", SURE)]})
    config = SharpConfig(critic="band", critic_floor=0.3, accept_threshold=0.8)
    prog, lms, retriever = sharp(generator, config)
    pred = prog(question=BRIDGE)
    assert lms["critic"].calls == int(asked)
    # a draft above the threshold is accepted unread; in the band or below the floor it is repaired
    assert pred.retries == (0 if lps is SURE else 1)
    assert (f"{BRIDGE} Quentin Tarantino", 5) in retriever.queries or lps is SURE


# ---- repairs -----------------------------------------------------------------------------------------------
def test_a_rejected_bridge_draft_searches_question_and_draft_at_the_widest_k_and_rereads_the_pool():
    generator = by_question("generator", {BRIDGE: [reply("Quentin Tarantino", UNSURE), reply("American", SURE)]})
    prog, lms, retriever = sharp(generator)
    pred = prog(question=BRIDGE)
    assert retriever.queries == [(BRIDGE, 3), (f"{BRIDGE} Quentin Tarantino", 5)]
    assert rounds(pred) == [("draft", "Quentin Tarantino"), ("retrieve", "American")]
    assert pred.answer == "American" and pred.stop_reason == "confident" and pred.retries == 1
    assert pred.cost["lm_calls"] == 2 and lms["planner"].calls == 0 and lms["composer"].calls == 0
    second = steps(pred, "generator")[1]
    # the re-read reads the pool's best passages, the bridge entity's page among them
    assert "p2" in second["evidence_ids"] and len(second["evidence_ids"]) == 5
    assert pred.queries == [BRIDGE, f"{BRIDGE} Quentin Tarantino"]


@pytest.mark.parametrize("draft", ["unknown", "yes"])
def test_a_draft_that_names_nothing_is_not_added_to_the_retrieval_query(draft):
    generator = by_question("generator", {BRIDGE: [reply(draft, UNSURE), reply("American", SURE)]})
    prog, _, retriever = sharp(generator)
    pred = prog(question=BRIDGE)
    assert retriever.queries == [(BRIDGE, 3), (BRIDGE, 5)] and pred.answer == "American"


def choice_generator(direct=("Quentin Tarantino", "Krzysztof Kieslowski"), values=("American", "Polish")):
    return by_question(
        "generator",
        {
            CHOICE: [reply(direct[0], UNSURE), reply(direct[1], UNSURE)],
            SUBS[0]: reply(values[0], SURE),
            SUBS[1]: reply(values[1], SURE),
        },
    )


def test_a_comparison_is_decomposed_then_retrieved_and_the_most_confident_round_answers():
    prog, lms, retriever = sharp(choice_generator())
    pred = prog(question=CHOICE)
    assert rounds(pred) == [
        ("draft", "Quentin Tarantino"),
        ("decompose", "Krzysztof Kieslowski"),
        ("retrieve", "Krzysztof Kieslowski"),
    ]
    # the decomposed read: one planner call, one search at sub_k and one read per sub-question, one composer call
    assert lms["planner"].calls == 1 and lms["composer"].calls == 1 and lms["generator"].calls == 4
    assert retriever.queries == [(CHOICE, 3), (SUBS[0], 2), (SUBS[1], 2), (f"{CHOICE} Quentin Tarantino", 5)]
    assert lms["composer"].rules.seen[0]["facts"] == f'["{SUBS[0]} -> American", "{SUBS[1]} -> Polish"]'
    assert pred.stop_reason == "max_repairs" and pred.retries == 2 and pred.cost["lm_calls"] == 6
    # the composed answer (P 0.5) beats the re-read (0.37): the most confident round answers, not the last
    (chosen,) = steps(pred, "select")
    assert chosen["action"] == "decompose" and pred.answer == "Krzysztof Kieslowski"
    assert pred.sub_queries == SUBS and {p.id for p in pred.passages} >= {"p2"}


def test_the_planner_is_given_the_options_and_a_sub_question_that_repeats_the_question_is_dropped():
    planner = FieldLM("planner", lambda f: {"sub_questions": [CHOICE.lower(), *SUBS]})
    prog, lms, retriever = sharp(choice_generator(), SharpConfig(critic="off", max_repairs=1), planner=planner)
    pred = prog(question=CHOICE)
    assert lms["planner"].rules.seen[0]["entities"] == '["Quentin Tarantino", "Krzysztof Kieslowski"]'
    assert steps(pred, "planner")[0]["sub_questions"] == SUBS
    assert [q for q, _ in retriever.queries] == [CHOICE, *SUBS]


def test_a_form_may_have_its_own_accept_threshold():
    config = SharpConfig(critic="off", accept_threshold=0.8, accept_comparison=0.3)
    assert config.accept_for("comparison") == 0.3 and config.accept_for("yesno") == config.accept_for("bridge") == 0.8
    prog, lms, _ = sharp(choice_generator(), config)
    pred = prog(question=CHOICE)  # the draft's P 0.37 is enough for a comparison
    assert pred.stop_reason == "confident" and pred.cost["lm_calls"] == 1
    generator = by_question("generator", {BRIDGE: [reply("Quentin Tarantino", UNSURE), reply("American", SURE)]})
    prog, _, _ = sharp(generator, config)
    assert prog(question=BRIDGE).retries == 1  # not for a bridge question
    band = config.replace(critic="band")
    assert wants_critic(0.5, band, "bridge") and not wants_critic(0.5, band, "comparison")


def test_select_last_answers_with_the_last_round():
    direct = ("Quentin Tarantino", "Quentin Tarantino")
    prog, _, _ = sharp(choice_generator(direct), SharpConfig(critic="off", select="last"))
    pred = prog(question=CHOICE)
    assert steps(pred, "select")[0]["action"] == "retrieve" and pred.answer == "Quentin Tarantino"
    prog, _, _ = sharp(choice_generator(direct), SharpConfig(critic="off", select="confidence"))
    assert prog(question=CHOICE).answer == "Krzysztof Kieslowski"


@pytest.mark.parametrize("max_repairs,actions", [(0, ["draft"]), (1, ["draft", "decompose"])])
def test_max_repairs_stops_the_loop(max_repairs, actions):
    prog, _, _ = sharp(choice_generator(), SharpConfig(critic="off", max_repairs=max_repairs))
    pred = prog(question=CHOICE)
    assert [a for a, _ in rounds(pred)] == actions and pred.stop_reason == "max_repairs"


def test_the_budget_stops_the_loop_after_the_round_that_spent_it():
    config = SharpConfig(critic="band", budget=Budget(max_lm_calls=2))
    prog, lms, _ = sharp(choice_generator(), config)
    pred = prog(question=CHOICE)
    assert pred.stop_reason == "budget_lm_calls" and rounds(pred) == [("draft", "Quentin Tarantino")]
    assert pred.cost["lm_calls"] == 2 and lms["critic"].calls == 1 and lms["planner"].calls == 0
    assert pred.answer == "Quentin Tarantino"  # every exit answers


@pytest.mark.parametrize("verdict,first", [("incomplete", "retrieve"), ("unsupported", "decompose")])
def test_an_incomplete_critique_moves_the_retrieval_repair_first(verdict, first):
    critic = FieldLM("critic", lambda f: crit(verdict, 0.7, missing=["the nationality of Kieslowski"]))
    prog, _, _ = sharp(choice_generator(), SharpConfig(critic="always", max_repairs=1), critic)
    pred = prog(question=CHOICE)
    assert [a for a, _ in rounds(pred)] == ["draft", first]
    assert steps(pred, "critic")[0]["missing_information"] == ["the nationality of Kieslowski"]


# ---- what the issue calls bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "critic_reply,problem",
    [
        ({"nonsense": "@@@"}, "no valid verdict (None)"),
        ({"verdict": "maybe", "confidence": 0.9}, "no valid verdict ('maybe')"),
        ({"verdict": "supported", "confidence": "high"}, "no 0-1 confidence ('high')"),
        ({"verdict": "supported", "confidence": 250.0}, "no 0-1 confidence (250.0)"),
    ],
    ids=["no verdict", "unknown verdict", "unparseable confidence", "confidence out of range"],
)
def test_a_critique_without_a_usable_verdict_is_discarded_and_the_draft_stands_as_the_gate_judged_it(
    critic_reply, problem
):
    critic = FieldLM("critic", lambda f: critic_reply)
    generator = by_question("generator", {BRIDGE: reply("American", HALF)})
    prog, lms, _ = sharp(generator, SharpConfig(critic="always", max_repairs=0), critic)
    pred = prog(question=BRIDGE)
    (c,) = steps(pred, "critic")
    assert c["critic_problem"] == problem and c["verdict"] is None and c["p_supported"] is None
    assert c["confidence_source"] == "discarded"
    (judged,) = steps(pred, "judgement")
    assert judged["source"] == "gate" and judged["p_right"] == judged["p_gate"] == pytest.approx(0.5, abs=1e-3)
    assert pred.answer == "American" and lms["critic"].calls == 1


def test_an_unparseable_critic_reply_is_discarded_as_unparseable():
    prog, _, _ = sharp(by_question("generator", {BRIDGE: reply("American", HALF)}), SharpConfig(critic="always"))
    prog.critic.lm = GarbageLM("critic")
    pred = prog(question=BRIDGE)
    problems = [s["critic_problem"] for s in steps(pred, "critic")]
    assert problems and all(p in ("unparseable", "no valid verdict (None)") for p in problems)
    assert all(s["source"] == "gate" for s in steps(pred, "judgement"))


@pytest.mark.parametrize("missing_value", ["unknown", ""])
def test_a_decomposed_read_without_a_value_falls_back_and_the_direct_read_answers(missing_value):
    generator = choice_generator(values=("American", missing_value))
    prog, lms, _ = sharp(generator, SharpConfig(critic="off", max_repairs=1))
    pred = prog(question=CHOICE)
    (draft, decomposed) = steps(pred, "judgement")
    assert decomposed["answer"] is None and decomposed["p_right"] is None
    assert decomposed["fallback"] == f"no value read for {SUBS[1]!r}: the direct read stands"
    assert lms["composer"].calls == 0  # nothing to compose
    assert steps(pred, "select")[0]["action"] == "draft" and pred.answer == "Quentin Tarantino"


def test_a_planner_with_fewer_than_two_sub_questions_falls_back_without_reading():
    planner = FieldLM("planner", lambda f: {"sub_questions": [SUBS[0]]})
    prog, lms, retriever = sharp(choice_generator(), SharpConfig(critic="off", max_repairs=1), planner=planner)
    pred = prog(question=CHOICE)
    assert "the planner wrote 1 sub-question(s)" in steps(pred, "judgement")[1]["fallback"]
    assert lms["generator"].calls == 1 and retriever.queries == [(CHOICE, 3)]
    assert pred.answer == "Quentin Tarantino"


def test_missing_log_probabilities_give_an_uncalibrated_half_traced_with_why():
    prog, _, _ = sharp(by_question("generator", {BRIDGE: reply("American", None)}), SharpConfig(critic="off"))
    with traced(BRIDGE, 2000, Budget()) as (q, tr):
        run = prog.run(q, tr)
    draft = run.rounds[0]
    gen = draft["steps"][-1]
    assert gen["role"] == "generator" and gen["answer_confidence"] is None
    assert gen["confidence_problem"] == "no log-probabilities"
    assert draft["features"]["lp_missing"] == 1.0 and draft["p_gate"] == UNCALIBRATED_P
    # 0.5 is below the default threshold: the draft is repaired, read again without log-probabilities alike
    assert [r["action"] for r in run.rounds] == ["draft", "retrieve"] and run.stop == "no_repair_left"


def test_garbage_from_every_role_still_answers_with_a_trace():
    prog = SharpRAG(KeywordRetriever(CORPUS), SharpConfig(critic="always"))
    g = GarbageLM()
    assign(prog, {"planner": g, "critic": g, "generator": g, "composer": g})
    pred = prog(question="Are Pulp Fiction and Three Colours Red both from 1994?")
    assert pred.answer == "unknown" and pred.stop_reason in ("no_repair_left", "max_repairs")
    roles = [s["role"] for s in pred.trace]
    assert roles[:2] == ["retriever", "generator"] and roles[-1] == "select" and "planner" in roles
    assert all(s["error"] for s in pred.trace if s["role"] in ("planner", "critic", "generator"))


# ---- questions, config, state -----------------------------------------------------------------------------
@pytest.mark.parametrize("question", ["", "   \n\t"])
def test_empty_question_is_a_clear_error(question):
    with pytest.raises(QuestionError, match="empty question"):
        SharpRAG(KeywordRetriever())(question=question)


def test_very_long_question_is_truncated_and_noted():
    prog, _, retriever = sharp(FieldLM("generator", lambda f: reply("x")))
    pred = prog(question="Palme d'Or " * 1000)  # 11,000 characters
    assert pred.trace[0]["role"] == "input" and "truncated" in pred.trace[0]["note"]
    assert all(len(q) <= 2000 for q, _ in retriever.queries)


def test_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ConfigError, match="unknown key 'confidence_threshold'"):
        SharpConfig.from_mapping({"confidence_threshold": 0.5})  # the evidence critic's threshold is gone
    with pytest.raises(ConfigError, match="k_schedule"):
        SharpConfig.from_mapping({"k_schedule": [5, 3]})
    with pytest.raises(ConfigError, match="accept_threshold"):
        SharpConfig.from_mapping({"accept_threshold": 1.5})
    with pytest.raises(ConfigError, match="listed twice"):
        SharpConfig.from_mapping({"repair_comparison": ["retrieve", "retrieve"]})
    with pytest.raises(ConfigError, match="repair_bridge"):
        SharpConfig.from_mapping({"repair_bridge": ["bridge"]})
    with pytest.raises(ConfigError, match="critic"):
        SharpConfig.from_mapping({"critic": "sometimes"})


def test_state_round_trip_keeps_demos_and_instructions(tmp_path):
    import dspy

    prog = SharpRAG(KeywordRetriever())
    prog.critic.signature = prog.critic.signature.with_instructions("Be strict.")
    prog.generator.demos = [dspy.Example(question="q", evidence="e", answer="a", supporting_passages=[1])]
    path = tmp_path / "state.json"
    prog.save(str(path))
    other = SharpRAG(KeywordRetriever())
    other.load(str(path))
    assert other.critic.signature.instructions == "Be strict."
    assert other.generator.demos[0]["answer"] == "a"
    assert {name for name, _ in other.named_predictors()} == {"planner", "critic", "generator", "composer"}


def test_a_looping_planner_is_capped_and_its_cut_json_salvaged():
    """A small planner may repeat a sub-question until its token cap cuts the JSON: the planner runs under
    planner_max_tokens, the sub-questions before the cut are kept, repeats once, up to max_sub_questions."""
    import dspy

    cut = '{"sub_questions": ["' + SUBS[0] + '", "' + SUBS[0] + '", "' + SUBS[1] + '", "What nat'
    seen: list[dict] = []

    class Looping(ScriptedLM):
        def forward(self, prompt=None, messages=None, **kwargs):
            seen.append(kwargs)
            self.calls += 1
            raise dspy.utils.exceptions.AdapterParseError(
                adapter_name="JSONAdapter", signature=prog.planner.signature, lm_response=cut
            )

    prog, _, retriever = sharp(
        choice_generator(),
        SharpConfig(critic="off", max_repairs=1, planner_max_tokens=48, max_sub_questions=2),
        planner=Looping("planner", []),
    )
    pred = prog(question=CHOICE)
    (plan,) = steps(pred, "planner")
    assert seen and all(kw.get("max_tokens") == 48 for kw in seen)
    assert plan["salvaged"] and plan["sub_questions"] == SUBS
    assert [q for q, _ in retriever.queries][1:3] == SUBS


def test_a_cut_critique_is_salvaged_and_read_from_its_written_confidence():
    import dspy

    cut = '{"verdict": "incomplete", "confidence": 0.8, "missing_information": ["the director\'s nation'

    class Cut(ScriptedLM):
        def forward(self, prompt=None, messages=None, **kwargs):
            self.calls += 1
            raise dspy.utils.exceptions.AdapterParseError(
                adapter_name="JSONAdapter", signature=prog.critic.signature, lm_response=cut
            )

    generator = by_question("generator", {BRIDGE: reply("Quentin Tarantino", HALF)})
    prog, _, _ = sharp(generator, SharpConfig(critic="always", max_repairs=0), critic=Cut("critic", []))
    pred = prog(question=BRIDGE)
    (c,) = steps(pred, "critic")
    assert c["salvaged"] and c["verdict"] == "incomplete" and c["critic_problem"] is None
    assert c["confidence_source"] == "verbal" and c["p_supported"] == pytest.approx(0.2)  # 1 - P(incomplete)
    assert c["missing_information"] == ["the director's nation"]


# ---- the pure decisions -------------------------------------------------------------------------------------
def rnd(action, answer="a", p=0.5, verdict=None, n=0):
    return {"action": action, "answer": answer, "p_right": p, "round": n,
            "critique": {"verdict": verdict} if verdict else None}  # fmt: skip


def test_next_step_stops_on_confidence_budget_repairs_and_an_exhausted_plan():
    cfg = SharpConfig(accept_threshold=0.8, max_repairs=2)
    assert next_step([rnd("draft", p=0.8)], "bridge", cfg) == (None, "confident")
    assert next_step([rnd("draft")], "bridge", cfg, "seconds") == (None, "budget_seconds")
    assert next_step([rnd("draft")], "bridge", cfg) == ("retrieve", "")
    assert next_step([rnd("draft"), rnd("retrieve")], "bridge", cfg) == (None, "no_repair_left")
    assert next_step([rnd("draft")], "yesno", cfg) == ("decompose", "")
    assert next_step([rnd("draft", verdict="incomplete")], "comparison", cfg) == ("retrieve", "")
    assert next_step([rnd("draft"), rnd("decompose")], "comparison", cfg.replace(max_repairs=1)) == (
        None,
        "max_repairs",
    )
    # a fallen-back round (no P) is skipped when the best P is sought
    assert next_step([rnd("draft"), rnd("decompose", None, None)], "comparison", cfg) == ("retrieve", "")
    assert next_step([rnd("draft")], "bridge", cfg.replace(repair_bridge=())) == (None, "no_repair_left")


def test_select_takes_the_most_confident_answered_round_the_earliest_on_a_tie():
    rounds_ = [rnd("draft", "a", 0.4, n=0), rnd("decompose", None, None, n=1), rnd("retrieve", "c", 0.4, n=2)]
    assert select(rounds_, SharpConfig())["answer"] == "a"
    assert select(rounds_, SharpConfig(select="last"))["answer"] == "c"
    rounds_[2]["p_right"] = 0.41
    assert select(rounds_, SharpConfig())["answer"] == "c"


def test_wants_critic_and_p_right_follow_the_policy():
    band = SharpConfig(critic="band", critic_floor=0.2, accept_threshold=0.8)
    assert [wants_critic(p, band) for p in (0.1, 0.2, 0.79, 0.8)] == [False, True, True, False]
    assert wants_critic(0.99, band.replace(critic="always")) and not wants_critic(0.5, band.replace(critic="off"))
    features = {"lp_mean": -0.1}
    assert p_right(features, 0.6, None, band) == (0.6, "gate")
    assert p_right(features, 0.6, {"p_supported": None, "critic_problem": "x"}, band) == (0.6, "gate")
    used = {"p_supported": 0.3, "verdict": "unsupported"}
    assert p_right(features, 0.6, used, band) == (0.3, "critic")
