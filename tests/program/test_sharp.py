"""SHARP's loop with scripted LMs: which rounds ran, which LM calls and searches they made, how code settled
each answer, and why the loop stopped."""

from __future__ import annotations

import pytest
from doubles import FieldLM, GarbageLM, KeywordRetriever, ScriptedLM, assign

from program.errors import ConfigError, QuestionError
from program.sharp.loop import next_step, p_right, select, wants_critic
from program.sharp.module import SharpRAG
from program.sharp.policy import UNCALIBRATED_P, SharpConfig
from program.sharp.rounds import Read, Round
from program.tracing import Budget, traced
from program.types import Passage

CORPUS = [
    Passage("p1", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino. It won the Palme d'Or."),
    Passage("p2", "Quentin Tarantino", "Quentin Jerome Tarantino (born March 27, 1963) is an American film director."),
    Passage("p3", "Three Colours Red", "Three Colours Red is a 1994 film by Krzysztof Kieslowski."),
    Passage("p4", "Krzysztof Kieslowski", "Krzysztof Kieslowski (27 June 1941 - 13 March 1996) was a Polish director."),
    Passage("p5", "Cannes Film Festival", "The Palme d'Or is the highest prize of the Cannes Film Festival."),
    Passage("p6", "Poland", "Poland is a country whose capital is Warsaw; Polish is spoken there."),
]
BRIDGE = "What nationality is the director of Pulp Fiction?"
CHOICE = "Who was born first, Quentin Tarantino or Krzysztof Kieslowski?"
OPTIONS = ["Quentin Tarantino", "Krzysztof Kieslowski"]
SUBS = ["When was Quentin Tarantino born?", "When was Krzysztof Kieslowski born?"]
BOTH = "Are both Quentin Tarantino and Krzysztof Kieslowski Polish film directors?"
CHECKS = ["Is Quentin Tarantino a Polish film director?", "Is Krzysztof Kieslowski a Polish film director?"]
SURE, HALF, UNSURE, LOST = [-0.05], [-0.6931], [-1.0], [-2.0]  # P(answer) 0.95, 0.5, 0.37, 0.14


def reply(answer, lps=SURE):
    """A reader's (or composer's) reply whose answer tokens have log-probabilities ``lps`` (a list), or whose
    first token weighs the choices ``lps`` (a dict choice -> probability)."""
    out = {"answer": answer, "supporting_passages": [1], "_logprobs": {"answer": lps}}
    return out if lps is not None else {k: v for k, v in out.items() if k != "_logprobs"}


def crit(verdict, p=0.9):
    """A critique whose verdict token carries probability ``p`` (the rest split between the others)."""
    others = [v for v in ("supported", "unsupported", "incomplete") if v != verdict]
    probs = {verdict: p, **{v: (1 - p) / 2 for v in others}}
    return {"verdict": verdict, "confidence": p, "_logprobs": {"verdict": probs}}


def by_question(role, replies):
    """An LM answering by the prompt's question: one reply, or a list given in turn (the last repeats)."""
    queue = {q: list(r) if isinstance(r, list) else [r] for q, r in replies.items()}

    def rule(fields):
        todo = queue[fields["question"]]
        return todo.pop(0) if len(todo) > 1 else todo[0]

    return FieldLM(role, rule)


def planner_for(entities, subs):
    return FieldLM("planner", lambda f: {"entities": list(entities), "sub_questions": list(subs)})


# one repair a form: the focused read for bridges, the comparison for the others (the defaults add retrieval)
ONE = {
    "ask_critic": "off",
    "repair_bridge": ("focus",),
    "repair_comparison": ("compare",),
    "repair_yesno": ("compare",),
}


def cfg(**over):
    return SharpConfig(**{**ONE, **over})


def sharp(generator, config=None, critic=None, planner=None, composer=None, focuser=None):
    retriever = KeywordRetriever(CORPUS)
    prog = SharpRAG(retriever, config or cfg())
    lms = {
        "planner": planner or planner_for(OPTIONS, SUBS),
        "critic": critic or FieldLM("critic", lambda f: crit("unsupported")),
        "generator": generator,
        "composer": composer or FieldLM("composer", lambda f: reply("Krzysztof Kieslowski", HALF)),
        "focuser": focuser or generator,
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
    prog, lms, retriever = sharp(by_question("generator", {BRIDGE: reply("American")}), SharpConfig(ask_critic=critic))
    pred = prog(question=BRIDGE)
    assert pred.answer == "American" and pred.stop_reason == "confident" and pred.retries == 0
    assert pred.cost["lm_calls"] == 1 and lms["critic"].calls == 0 and lms["planner"].calls == 0
    assert retriever.queries == [(BRIDGE, 3)]  # the question, at k_schedule[0]
    assert [s["role"] for s in pred.trace] == ["retriever", "generator", "judgement", "select"]
    (judged,) = steps(pred, "judgement")
    assert judged["p_gate"] == judged["p_right"] == pytest.approx(0.9512, abs=1e-4) and judged["source"] == "gate"
    assert judged["accepted"] and judged["how"] == "read"
    config = lms["generator"].rules.configs[0]
    assert config.logprobs == 10  # the answer tokens' log-probabilities, 10 alternatives each (P(yes) vs P(no))


def test_critic_always_reads_even_a_confident_draft_and_its_verdict_decides():
    critic = FieldLM("critic", lambda f: crit("supported", 0.85))
    prog, lms, _ = sharp(
        by_question("generator", {BRIDGE: reply("American")}), SharpConfig(ask_critic="always"), critic
    )
    pred = prog(question=BRIDGE)
    assert lms["critic"].calls == 1 and pred.cost["lm_calls"] == 2
    assert lms["critic"].rules.seen[0]["draft_answer"] == "American"
    (judged,) = steps(pred, "judgement")
    assert (judged["verdict"], judged["source"], judged["p_right"]) == ("supported", "critic", pytest.approx(0.85))


@pytest.mark.parametrize("lps,asked", [(SURE, False), (HALF, True), (LOST, False)],
                         ids=["above the threshold", "in the band", "below the floor"])  # fmt: skip
def test_the_critic_reads_only_rounds_whose_gate_probability_lies_in_its_band(lps, asked):
    generator = by_question("generator", {BRIDGE: [reply("Quentin Tarantino", lps), reply("American", SURE)]})
    config = SharpConfig(ask_critic="band", critic_floor=0.3, accept_threshold=0.8, repair_bridge=("retrieve",))
    prog, lms, retriever = sharp(generator, config)
    pred = prog(question=BRIDGE)
    assert lms["critic"].calls == int(asked)
    assert pred.retries == (0 if lps is SURE else 1)


# ---- repairs: retrieval --------------------------------------------------------------------------------------
def test_a_rejected_bridge_draft_searches_question_and_draft_at_the_widest_k_and_rereads():
    generator = by_question("generator", {BRIDGE: [reply("Quentin Tarantino", UNSURE), reply("American", SURE)]})
    prog, lms, retriever = sharp(generator, SharpConfig(ask_critic="off", repair_bridge=("retrieve",)))
    pred = prog(question=BRIDGE)
    assert retriever.queries == [(BRIDGE, 3), (f"{BRIDGE} Quentin Tarantino", 5)]
    assert rounds(pred) == [("draft", "Quentin Tarantino"), ("retrieve", "American")]
    assert pred.answer == "American" and pred.stop_reason == "confident" and pred.retries == 1
    second = steps(pred, "generator")[1]
    assert "p2" in second["evidence_ids"] and len(second["evidence_ids"]) == 5
    assert pred.queries == [BRIDGE, f"{BRIDGE} Quentin Tarantino"]


@pytest.mark.parametrize("draft", ["unknown", "yes"])
def test_a_draft_that_names_nothing_is_not_added_to_the_retrieval_query(draft):
    generator = by_question("generator", {BRIDGE: [reply(draft, UNSURE), reply("American", SURE)]})
    prog, _, retriever = sharp(generator, SharpConfig(ask_critic="off", repair_bridge=("retrieve",)))
    pred = prog(question=BRIDGE)
    assert retriever.queries == [(BRIDGE, 3), (BRIDGE, 5)] and pred.answer == "American"


# ---- repairs: the focused read ---------------------------------------------------------------------------
def test_a_draft_that_names_the_intermediate_entity_gets_a_focused_read_through_it():
    """The draft answers with Quentin Tarantino, the title of an evidence passage the question does not name:
    the sign of stopping at the bridge entity. The focused read reads his passage first, told he is the
    intermediate entity, and its answer wins."""
    generator = by_question("generator", {BRIDGE: reply("Quentin Tarantino", UNSURE)})
    focuser = FieldLM("focuser", lambda f: reply("American", SURE))
    prog, lms, retriever = sharp(generator, cfg(), focuser=focuser)
    pred = prog(question=BRIDGE)
    assert rounds(pred) == [("draft", "Quentin Tarantino"), ("focus", "American")]
    (seen,) = focuser.rules.seen
    assert seen["intermediate"] == "Quentin Tarantino" and seen["evidence"].startswith("[1] Quentin Tarantino:")
    assert retriever.queries[1] == ("Quentin Tarantino", 3)  # its own passages, at sub_k
    draft = steps(pred, "judgement")[0]
    assert pred.answer == "American" and draft["accepted"] is False
    assert steps(pred, "focuser")[0]["round"] == 1


def test_an_unflagged_draft_gets_no_focused_read_unless_the_policy_reads_every_rejected_one():
    generator = by_question("generator", {BRIDGE: reply("French", UNSURE)})
    focuser = FieldLM("focuser", lambda f: reply("American", SURE))
    prog, _, _ = sharp(generator, cfg(), focuser=focuser)
    pred = prog(question=BRIDGE)
    assert rounds(pred) == [("draft", "French")] and pred.stop_reason == "no_repair_left" and focuser.calls == 0
    prog, _, _ = sharp(generator, cfg(focus_when="rejected"), focuser=focuser)
    assert rounds(prog(question=BRIDGE)) == [("draft", "French"), ("focus", "American")]


# ---- repairs: comparisons decided in code ---------------------------------------------------------------------
def choice_generator(direct="Quentin Tarantino", values=("March 27, 1963", "27 June 1941"), lps=UNSURE):
    return by_question(
        "generator", {CHOICE: reply(direct, lps), SUBS[0]: reply(values[0], SURE), SUBS[1]: reply(values[1], SURE)}
    )


def test_a_comparison_reads_one_value_per_entity_and_code_compares_them():
    prog, lms, retriever = sharp(choice_generator())
    pred = prog(question=CHOICE)
    assert rounds(pred) == [("draft", "Quentin Tarantino"), ("compare", "Krzysztof Kieslowski")]
    assert lms["planner"].calls == 0  # a choice of two birth dates is planned by rule
    assert retriever.queries == [(CHOICE, 3), (SUBS[0], 3), (SUBS[1], 3)]  # each value single-hop, at sub_k
    assert lms["composer"].calls == 0  # code decided: no LM composes
    compared = steps(pred, "judgement")[1]
    assert compared["how"] == "code" and "'first': 27 June 1941 wins" in compared["why"]
    assert pred.answer == "Krzysztof Kieslowski" and pred.sub_queries == SUBS and pred.cost["lm_calls"] == 3


def test_the_planner_is_given_the_options_of_a_choice_it_plans():
    question = "Who made more films, Quentin Tarantino or Krzysztof Kieslowski?"
    subs = ["How many films did Quentin Tarantino make?", "How many films did Krzysztof Kieslowski make?"]
    generator = by_question("generator", {question: reply("Krzysztof Kieslowski", UNSURE),
                                          subs[0]: reply("10"), subs[1]: reply("about 20 films")})  # fmt: skip
    prog, lms, _ = sharp(generator, planner=planner_for(OPTIONS, subs))
    pred = prog(question=question)
    assert lms["planner"].rules.seen[0]["options"] == '["Quentin Tarantino", "Krzysztof Kieslowski"]'
    compared = steps(pred, "judgement")[1]
    assert (compared["answer"], compared["how"]) == ("Krzysztof Kieslowski", "code")


@pytest.mark.parametrize("values", [("a Tuesday", "long ago"), ("1963", "unknown")],
                         ids=["values that do not parse", "a value not read"])  # fmt: skip
def test_values_that_do_not_decide_are_composed_by_the_lm_and_the_trace_says_why(values):
    prog, lms, _ = sharp(choice_generator(values=values))
    pred = prog(question=CHOICE)
    compared = steps(pred, "judgement")[1]
    assert lms["composer"].calls == 1 and compared["how"] == "composed" and compared["why"]
    assert steps(pred, "composer")[0]["facts"] == [f"{SUBS[0]} -> {values[0]}", f"{SUBS[1]} -> {values[1]}"]


def test_compare_by_composer_always_composes():
    prog, lms, _ = sharp(choice_generator(), SharpConfig(ask_critic="off", compare_by="composer"))
    pred = prog(question=CHOICE)
    assert lms["composer"].calls == 1 and steps(pred, "judgement")[1]["how"] == "composed"


def test_a_yes_no_question_about_both_entities_is_checked_per_entity_and_combined_in_code():
    generator = by_question("generator", {BOTH: reply("yes", {"yes": 0.6, "no": 0.4}),
                                          CHECKS[0]: reply("yes", {"yes": 0.7, "no": 0.3}),
                                          CHECKS[1]: reply("yes", {"yes": 0.99, "no": 0.01})})  # fmt: skip
    planner = planner_for(OPTIONS, CHECKS)
    prog, lms, _ = sharp(generator, cfg(accept_threshold=0.99), planner=planner)
    pred = prog(question=BOTH)
    assert rounds(pred) == [("draft", "yes"), ("compare", "yes")]
    assert steps(pred, "judgement")[1]["why"] == "both: every one read yes" and lms["composer"].calls == 0
    # the per-entity checks decided from P(yes): Tarantino's 0.7 is a "no" at 0.9, so not both
    prog, _, _ = sharp(generator, cfg(accept_threshold=0.99, yes_threshold_sub=0.9), planner=planner)
    assert rounds(prog(question=BOTH))[1] == ("compare", "no")


# ---- code settles the draft ---------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold,answer,how", [(None, "yes", "read"), (0.5, "yes", "p_yes"), (0.8, "no", "p_yes")])
def test_a_yes_no_draft_is_decided_from_p_yes_against_the_threshold(threshold, answer, how):
    generator = by_question("generator", {BOTH: reply("yes", {"yes": 0.7, "no": 0.3})})
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0, yes_threshold=threshold))
    pred = prog(question=BOTH)
    (judged,) = steps(pred, "judgement")
    assert (pred.answer, judged["how"]) == (answer, how)
    if how == "p_yes":
        assert judged["why"] == f"P(yes) 0.70 against {threshold:.2f}"


def test_a_yes_no_draft_without_log_probabilities_keeps_its_text_and_says_so():
    generator = by_question("generator", {BOTH: reply("yes", None)})
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0, yes_threshold=0.9))
    pred = prog(question=BOTH)
    (judged,) = steps(pred, "judgement")
    assert pred.answer == "yes" and judged["how"] == "read"
    assert judged["why"] == "no P(yes) from the LM: its text answer"
    assert steps(pred, "generator")[0]["confidence_problem"] == "no log-probabilities"


def test_a_chosen_option_is_written_as_its_passage_writes_it_or_as_the_question_names_it():
    generator = choice_generator(direct="Tarantino", lps=SURE)
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off"))
    assert prog(question=CHOICE).answer == "Quentin Tarantino"  # the option the answer names
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", option_form="passage"))
    assert prog(question=CHOICE).answer == "Quentin Jerome Tarantino"  # his passage's first sentence


def test_a_choice_answered_with_no_option_is_forced_only_when_the_policy_says_so():
    generator = choice_generator(direct="Kieslowski, Krzysztof", lps=SURE)
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0))
    assert prog(question=CHOICE).answer == "Kieslowski, Krzysztof"
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0, force_option=True))
    pred = prog(question=CHOICE)
    assert pred.answer == "Krzysztof Kieslowski" and steps(pred, "judgement")[0]["how"] == "forced"


@pytest.mark.parametrize("rule,answer", [("off", "Tarantino"), ("span", "Tarantino"),
                                         ("name", "Quentin Jerome Tarantino")])  # fmt: skip
def test_a_span_is_written_as_the_passage_writes_it(rule, answer):
    question = "Who directed Pulp Fiction?"
    generator = by_question("generator", {question: reply("Quentin Tarantino" if rule == "name" else "Tarantino")})
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0, span_rule=rule))
    pred = prog(question=question)
    assert pred.answer == (answer if rule != "name" else "Quentin Jerome Tarantino")


def test_the_closest_span_replaces_an_answer_the_evidence_does_not_hold():
    question = "What prize did Pulp Fiction win?"
    generator = by_question("generator", {question: reply("the Palme d'Or award")})
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0, span_rule="span"))
    pred = prog(question=question)
    assert pred.answer == "Palme d'Or" and steps(pred, "judgement")[0]["how"] == "span"


# ---- policy: thresholds, caps, budget, selection -------------------------------------------------------------
def test_a_form_may_have_its_own_accept_threshold():
    config = SharpConfig(ask_critic="off", accept_threshold=0.8, accept_comparison=0.3)
    assert config.accept_for("comparison") == 0.3 and config.accept_for("yesno") == config.accept_for("bridge") == 0.8
    prog, _, _ = sharp(choice_generator(), config)
    pred = prog(question=CHOICE)  # the draft's P 0.37 is enough for a comparison
    assert pred.stop_reason == "confident" and pred.cost["lm_calls"] == 1
    band = config.replace(ask_critic="band")
    assert wants_critic(0.5, band, "bridge") and not wants_critic(0.5, band, "comparison")


def test_select_last_answers_with_the_last_round_and_confidence_with_the_surest():
    prog, _, _ = sharp(choice_generator(lps=SURE), cfg(accept_threshold=0.99, choose="last"))
    assert prog(question=CHOICE).answer == "Krzysztof Kieslowski"
    prog, _, _ = sharp(choice_generator(lps=SURE), cfg(accept_threshold=0.99))
    assert prog(question=CHOICE).answer == "Quentin Tarantino"  # the draft's P 0.95 beats the comparison's


@pytest.mark.parametrize("max_repairs,actions", [(0, ["draft"]), (1, ["draft", "compare"])])
def test_max_repairs_stops_the_loop(max_repairs, actions):
    config = SharpConfig(ask_critic="off", max_repairs=max_repairs, repair_comparison=("compare", "retrieve"),
                         accept_threshold=0.99)  # fmt: skip
    prog, _, _ = sharp(choice_generator(), config)
    pred = prog(question=CHOICE)
    assert [a for a, _ in rounds(pred)] == actions and pred.stop_reason == "max_repairs"


def test_the_budget_stops_the_loop_after_the_round_that_spent_it():
    config = SharpConfig(ask_critic="band", budget=Budget(max_lm_calls=2))
    prog, lms, _ = sharp(choice_generator(), config)
    pred = prog(question=CHOICE)
    assert pred.stop_reason == "budget_lm_calls" and rounds(pred) == [("draft", "Quentin Tarantino")]
    assert pred.cost["lm_calls"] == 2 and lms["critic"].calls == 1 and lms["planner"].calls == 0
    assert pred.answer == "Quentin Tarantino"  # every exit answers


@pytest.mark.parametrize("verdict,first", [("incomplete", "retrieve"), ("unsupported", "compare")])
def test_an_incomplete_critique_moves_the_retrieval_repair_first(verdict, first):
    critic = FieldLM("critic", lambda f: crit(verdict, 0.7))
    config = SharpConfig(ask_critic="always", max_repairs=1, repair_comparison=("compare", "retrieve"))
    prog, _, _ = sharp(choice_generator(), config, critic)
    assert [a for a, _ in rounds(prog(question=CHOICE))] == ["draft", first]


# ---- what the issues call bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "critic_reply,problem",
    [
        ({"nonsense": "@@@"}, "no valid verdict (None)"),
        ({"verdict": "maybe", "confidence": 0.9}, "no valid verdict ('maybe')"),
        ({"verdict": "supported", "confidence": "high"}, "no 0-1 confidence ('high')"),
    ],
    ids=["no verdict", "unknown verdict", "unparseable confidence"],
)
def test_a_critique_without_a_usable_verdict_is_discarded_and_the_round_stands_as_the_gate_judged_it(
    critic_reply, problem
):
    critic = FieldLM("critic", lambda f: critic_reply)
    generator = by_question("generator", {BRIDGE: reply("American", HALF)})
    prog, lms, _ = sharp(generator, SharpConfig(ask_critic="always", max_repairs=0), critic)
    pred = prog(question=BRIDGE)
    (c,) = steps(pred, "critic")
    assert c["critic_problem"] == problem and c["verdict"] is None and c["p_supported"] is None
    (judged,) = steps(pred, "judgement")
    assert judged["source"] == "gate" and judged["p_right"] == judged["p_gate"] == pytest.approx(0.5, abs=1e-3)
    assert pred.answer == "American"


PLANNED = "Who is more famous, Quentin Tarantino or Krzysztof Kieslowski?"  # no rule plans it: the planner does


def test_a_planner_with_fewer_than_two_sub_questions_falls_back_without_reading():
    planner = planner_for(OPTIONS, SUBS[:1])
    generator = by_question("generator", {PLANNED: reply("Quentin Tarantino", UNSURE)})
    prog, lms, retriever = sharp(generator, cfg(), planner=planner)
    pred = prog(question=PLANNED)
    assert "the planner wrote 1 sub-question(s)" in steps(pred, "judgement")[1]["fallback"]
    assert lms["generator"].calls == 1 and retriever.queries == [(PLANNED, 3)]
    assert steps(pred, "select")[0]["action"] == "draft" and pred.answer == "Quentin Tarantino"


COUNTED = "Who made more films, Quentin Tarantino or Krzysztof Kieslowski?"
COUNTS = ["How many films does Quentin Tarantino have?", "How many films does Krzysztof Kieslowski have?"]
CHOSEN = "Which director was also a screenwriter, Quentin Tarantino or Krzysztof Kieslowski?"
TRUE_OF = ["Is it true that Quentin Tarantino was also a screenwriter?",
           "Is it true that Krzysztof Kieslowski was also a screenwriter?"]  # fmt: skip


def test_a_choice_the_planner_falls_short_on_is_counted_per_option_by_rule_and_decided_in_code():
    generator = by_question("generator", {COUNTED: reply("Quentin Tarantino", UNSURE),
                                          COUNTS[0]: reply("10 films"), COUNTS[1]: reply("21 films")})  # fmt: skip
    prog, lms, retriever = sharp(generator, cfg(compare_by="code"), planner=planner_for(OPTIONS, []))
    pred = prog(question=COUNTED)
    (plan,) = steps(pred, "planner")
    assert plan["checks_by_rule"] and plan["sub_questions"] == COUNTS and lms["planner"].calls == 1
    assert [q for q, _ in retriever.queries[1:]] == COUNTS  # each option's count searched and read alone
    assert lms["composer"].calls == 0 and pred.answer == "Krzysztof Kieslowski"
    assert steps(pred, "judgement")[1]["how"] == "code"


@pytest.mark.parametrize(
    ("p_first", "p_second", "answer", "composed"),
    [
        (0.95, 0.7, "Quentin Tarantino", False),  # both read "yes": the surer one
        (0.2, 0.45, "Krzysztof Kieslowski", False),  # both read "no": still the surer yes
        (0.8, 0.8, "Krzysztof Kieslowski", True),  # a tie: code cannot pick, the composer answers
    ],
)
def test_a_choice_of_what_is_true_of_one_option_is_checked_per_option_and_the_surer_yes_wins(
    p_first, p_second, answer, composed
):
    def yes(p):
        return reply("yes" if p >= 0.5 else "no", {"yes": p, "no": 1 - p})

    generator = by_question("generator", {CHOSEN: reply("Quentin Tarantino", UNSURE),
                                          TRUE_OF[0]: yes(p_first), TRUE_OF[1]: yes(p_second)})  # fmt: skip
    prog, lms, _ = sharp(generator, cfg(compare_by="code"), planner=planner_for(OPTIONS, ["Who wrote?"]))
    pred = prog(question=CHOSEN)
    assert steps(pred, "planner")[0]["sub_questions"] == TRUE_OF
    compared = steps(pred, "judgement")[1]
    assert lms["composer"].calls == int(composed) and pred.answer == answer
    assert compared["how"] == ("composed" if composed else "code")
    if not composed:
        assert "the surer yes" in compared["why"]


def test_a_yes_no_check_without_log_probabilities_leaves_the_choice_to_the_composer():
    generator = by_question("generator", {CHOSEN: reply("Quentin Tarantino", UNSURE),
                                          TRUE_OF[0]: reply("yes", None), TRUE_OF[1]: reply("yes", None)})  # fmt: skip
    prog, lms, _ = sharp(generator, cfg(compare_by="code"), planner=planner_for(OPTIONS, []))
    pred = prog(question=CHOSEN)
    assert lms["composer"].calls == 1 and pred.answer == "Krzysztof Kieslowski"
    assert steps(pred, "judgement")[1]["how"] == "composed"


def test_a_comparison_without_options_whose_planner_names_fewer_entities_falls_back():
    from program.sharp.forms import options, question_form

    question = "The director of Pulp Fiction or of Three Colours Red: who was born first?"
    generator = by_question("generator", {question: reply("Quentin Tarantino", UNSURE)})
    assert question_form(question) == "comparison" and options(question) == []
    planner = planner_for(["Quentin Tarantino"], SUBS)
    prog, lms, _ = sharp(generator, cfg(), planner=planner)
    pred = prog(question=question)
    assert steps(pred, "judgement")[1]["fallback"] == "1 entities for 2 sub-questions: the draft stands"
    assert lms["generator"].calls == 1 and pred.answer == "Quentin Tarantino"


def test_missing_log_probabilities_give_an_uncalibrated_half_traced_with_why():
    prog, _, _ = sharp(by_question("generator", {BRIDGE: reply("American", None)}))
    with traced(BRIDGE, 2000, Budget()) as (q, tr):
        run = prog.run(q, tr)
    draft = run.rounds[0]
    gen = draft.steps[-1]
    assert gen["role"] == "generator" and gen["answer_confidence"] is None
    assert gen["confidence_problem"] == "no log-probabilities" and draft.read.top is None
    assert draft.features["lp_missing"] == 1.0 and draft.p_gate == UNCALIBRATED_P


def test_garbage_from_every_role_still_answers_with_a_trace():
    prog = SharpRAG(KeywordRetriever(CORPUS), SharpConfig(ask_critic="always", focus_when="rejected"))
    g = GarbageLM()
    assign(prog, {"planner": g, "critic": g, "generator": g, "composer": g, "focuser": g})
    for question in (BOTH, BRIDGE):
        pred = prog(question=question)
        assert pred.answer == "unknown" and pred.stop_reason in ("no_repair_left", "max_repairs")
        roles = [s["role"] for s in pred.trace]
        assert roles[:2] == ["retriever", "generator"] and roles[-1] == "select"
        assert all(s["error"] for s in pred.trace if s["role"] in ("planner", "critic", "generator"))


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
        SharpConfig.from_mapping({"confidence_threshold": 0.5})
    with pytest.raises(ConfigError, match="k_schedule"):
        SharpConfig.from_mapping({"k_schedule": [5, 3]})
    with pytest.raises(ConfigError, match="k_schedule is the draft's k and the retrieval repair's"):
        SharpConfig.from_mapping({"k_schedule": [3, 5, 7]})  # only two are read: a third is refused, not ignored
    with pytest.raises(ConfigError, match="listed twice"):
        SharpConfig.from_mapping({"repair_comparison": ["retrieve", "retrieve"]})
    with pytest.raises(ConfigError, match=r"\['compare'\] cannot repair a bridge question"):
        SharpConfig.from_mapping({"repair_bridge": ["compare"]})
    with pytest.raises(ConfigError, match="yes_threshold"):
        SharpConfig.from_mapping({"yes_threshold": 1.5})
    with pytest.raises(ConfigError, match="span_rule"):
        SharpConfig.from_mapping({"span_rule": "always"})


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
    assert {name for name, _ in other.named_predictors()} == {
        "planner",
        "critic",
        "generator",
        "composer",
        "focuser",
        "hop_planner",
    }


def test_a_looping_planner_is_capped_and_its_cut_json_salvaged():
    """A small planner may repeat a sub-question until its token cap cuts the JSON: the planner runs under
    planner_max_tokens, the sub-questions before the cut are kept, repeats once, up to max_sub_questions."""
    import dspy

    cut = '{"entities": [], "sub_questions": ["' + SUBS[0] + '", "' + SUBS[0] + '", "' + SUBS[1] + '", "When w'
    seen: list[dict] = []

    class Looping(ScriptedLM):
        def forward(self, prompt=None, messages=None, **kwargs):
            seen.append(kwargs)
            self.calls += 1
            raise dspy.utils.exceptions.AdapterParseError(
                adapter_name="JSONAdapter", signature=prog.planner.signature, lm_response=cut
            )

    config = SharpConfig(ask_critic="off", planner_max_tokens=48, max_sub_questions=2)
    generator = by_question("generator", {PLANNED: reply("Quentin Tarantino", UNSURE), SUBS[0]: reply("1963"),
                                          SUBS[1]: reply("1941")})  # fmt: skip
    prog, _, retriever = sharp(generator, config, planner=Looping("planner", []))
    pred = prog(question=PLANNED)
    (plan,) = steps(pred, "planner")
    assert seen and all(kw.get("max_tokens") == 48 for kw in seen)
    assert plan["salvaged"] and plan["sub_questions"] == SUBS and plan["entities"] == OPTIONS
    assert [q for q, _ in retriever.queries][1:3] == SUBS


# ---- the pure decisions -------------------------------------------------------------------------------------
def rnd(action, answer="a", p=0.5, verdict=None, n=0, features=None):
    out = Round(action, read=Read("q", answer or "unknown"), round=n, answer=answer, p_right=p, features=features)
    if verdict:
        out.critique, out.critic_used = {"verdict": verdict}, True
    return out


def test_next_step_stops_on_confidence_budget_repairs_and_an_exhausted_plan():
    cfg = SharpConfig(accept_threshold=0.8, max_repairs=2, repair_bridge=("retrieve",),
                      repair_comparison=("compare", "retrieve"))  # fmt: skip
    assert next_step([rnd("draft", p=0.8)], "bridge", cfg) == (None, "confident")
    assert next_step([rnd("draft")], "bridge", cfg, "seconds") == (None, "budget_seconds")
    assert next_step([rnd("draft")], "bridge", cfg) == ("retrieve", "")
    assert next_step([rnd("draft"), rnd("retrieve")], "bridge", cfg) == (None, "no_repair_left")
    assert next_step([rnd("draft")], "yesno", cfg) == ("compare", "")
    assert next_step([rnd("draft", verdict="incomplete")], "comparison", cfg) == ("retrieve", "")
    assert next_step([rnd("draft"), rnd("compare")], "comparison", cfg.replace(max_repairs=1)) == (None, "max_repairs")
    # a round without an answer (no P) is skipped when the best P is sought
    assert next_step([rnd("draft"), rnd("compare", None, None)], "comparison", cfg) == ("retrieve", "")
    # a form the policy never repairs: its P(right) decided nothing, whatever it is (not "confident")
    assert next_step([rnd("draft", p=0.2)], "bridge", cfg.replace(repair_bridge=())) == (None, "no_repair_for_form")
    assert next_step([rnd("draft", p=0.9)], "bridge", cfg.replace(repair_bridge=())) == (None, "no_repair_for_form")
    assert next_step([rnd("draft", p=0.9)], "bridge", cfg.replace(max_repairs=0)) == (None, "max_repairs")
    focus = cfg.replace(repair_bridge=("focus",), focus_when="flagged")
    assert next_step([rnd("draft")], "bridge", focus) == (None, "no_repair_left")
    flagged = rnd("draft")
    flagged.flagged = True  # what the reader wrote is flagged (program.sharp.loop.flagged)
    assert next_step([flagged], "bridge", focus) == ("focus", "")
    assert next_step([rnd("draft")], "bridge", focus.replace(focus_when="rejected")) == ("focus", "")


def test_select_takes_the_most_confident_answered_round_the_earliest_on_a_tie():
    rounds_ = [rnd("draft", "a", 0.4, n=0), rnd("compare", None, None, n=1), rnd("retrieve", "c", 0.4, n=2)]
    assert select(rounds_, SharpConfig()).answer == "a"
    assert select(rounds_, SharpConfig(choose="last")).answer == "c"
    rounds_[2].p_right = 0.41
    assert select(rounds_, SharpConfig()).answer == "c"


def test_wants_critic_and_p_right_follow_the_policy():
    band = SharpConfig(ask_critic="band", critic_floor=0.2, accept_threshold=0.8)
    assert [wants_critic(p, band, "bridge") for p in (0.1, 0.2, 0.79, 0.8)] == [False, True, True, False]
    assert wants_critic(0.99, band.replace(ask_critic="always"), "bridge")
    assert not wants_critic(0.5, band.replace(ask_critic="off"), "bridge")
    features = {"lp_mean": -0.1}
    assert p_right(features, 0.6, None, band) == (0.6, "gate")
    assert p_right(features, 0.6, {"p_supported": None, "critic_problem": "x"}, band) == (0.6, "gate")
    assert p_right(features, 0.6, {"p_supported": 0.3, "verdict": "unsupported"}, band) == (0.3, "critic")


@pytest.mark.parametrize("rule", ["name", "span", "both"])
def test_a_span_rule_drops_a_titles_parenthesised_qualifier(rule):
    question = "Which film won the Palme d'Or in 1994?"
    generator = by_question("generator", {question: reply("Pulp Fiction (film)")})
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0, span_rule=rule))
    assert prog(question=question).answer == "Pulp Fiction"
    prog, _, _ = sharp(generator, SharpConfig(ask_critic="off", max_repairs=0))
    assert prog(question=question).answer == "Pulp Fiction (film)"  # the rule off: as read


def test_a_recording_of_focused_reads_after_flagged_drafts_alone_serves_flagged_policies(tmp_path):
    """focus_when="flagged": a focused read only where the draft's own words are flagged; the recording is
    then complete for every question, and replays as a live run of a policy that focuses so."""
    from optimize.evaluate import evaluate
    from optimize.recording import complete, record
    from optimize.replay import score
    from program.sharp.rounds import lookup_in

    other = "When was Krzysztof Kieslowski born?"
    generator = by_question(
        "generator", {BRIDGE: reply("Quentin Tarantino", UNSURE), other: reply("27 June 1941", UNSURE)}
    )
    focuser = FieldLM("focuser", lambda f: reply("American", SURE))
    import dspy

    examples = [dspy.Example(id=f"q{i}", question=q, answer=a, answer_aliases=[]).with_inputs("question")
                for i, (q, a) in enumerate([(BRIDGE, "American"), (other, "27 June 1941")])]  # fmt: skip
    prog, lms, _ = sharp(generator, cfg(), focuser=focuser)
    kept = ("focus", "retrieve")  # the bridge repairs a focused policy reaches (the chain is not one of them)
    recs = record(prog, examples, path=tmp_path / "rec.jsonl", critique=False, actions=kept, focus_when="flagged")
    assert [[x["action"] for x in recs[i]["rounds"]] for i in ("q0", "q1")] == [["draft", "focus", "retrieve"],
                                                                              ["draft", "retrieve"]]  # fmt: skip
    assert all(complete(r, prog, kept, critique=False, focus_when="flagged") for r in recs.values())
    assert not complete(recs["q1"], prog, kept, critique=False)  # a focused read after every draft: q1's is missing
    assert not complete(recs["q1"], prog, critique=False, focus_when="flagged")  # every repair: the chain is missing
    live = evaluate(sharp(generator, cfg(), focuser=focuser)[0], examples, progress=False)
    replayed = score(recs, examples, cfg(), passages=lookup_in({p.id: p for p in CORPUS}))
    assert [r["answer"] for r in replayed.rows] == [r["answer"] for r in live.rows] == ["American", "27 June 1941"]


def test_a_choice_of_two_dates_is_planned_by_rule_with_no_planner_call():
    question = "Who was born later, Quentin Tarantino or Krzysztof Kieslowski?"
    subs = ["When was Quentin Tarantino born?", "When was Krzysztof Kieslowski born?"]
    generator = by_question("generator", {question: reply("Krzysztof Kieslowski", UNSURE),
                                          subs[0]: reply("March 27, 1963"), subs[1]: reply("27 June 1941")})  # fmt: skip
    prog, lms, _ = sharp(generator)
    pred = prog(question=question)
    (plan,) = steps(pred, "planner")
    assert plan["by_rule"] and plan["sub_questions"] == subs and lms["planner"].calls == 0
    assert pred.answer == "Quentin Tarantino" and pred.cost["lm_calls"] == 3


def test_a_reply_keeps_its_confidence_in_the_step_and_leaves_the_raw_log_probabilities_out_of_the_trace():
    import dspy

    prog, _, _ = sharp(by_question("generator", {BRIDGE: reply("American")}), SharpConfig(ask_critic="off"))
    with dspy.context(trace=[]):
        pred = prog(question=BRIDGE)
        calls = list(dspy.settings.trace)
    assert steps(pred, "generator")[0]["answer_confidence"]["first"] == pytest.approx(0.9512, abs=1e-4)
    assert calls and all("logprobs" not in out for _, _, out in calls)  # what GEPA would reflect on
