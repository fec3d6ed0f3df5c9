"""The chain of single hops (program/sharp/chain.py, plans.py) with scripted LMs: which plan ran and who wrote
it, what each hop searched and read, why a chain stopped, and that a recorded chain replays as it ran."""

from __future__ import annotations

import pytest
from doubles import FieldLM, GarbageLM, KeywordRetriever, assign

from program.sharp.module import SharpRAG
from program.sharp.plans import Plan, check_plan, loops_back, reworded, rule_plan, substitute
from program.sharp.policy import SharpConfig
from program.types import Passage

CORPUS = [
    Passage("p1", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino. It won the Palme d'Or."),
    Passage("p2", "Quentin Tarantino", "Quentin Jerome Tarantino (born March 27, 1963) is an American film director."),
    Passage("p3", "Three Colours Red", "Three Colours Red is a 1994 film by Krzysztof Kieslowski."),
    Passage("p4", "Krzysztof Kieslowski", "Krzysztof Kieslowski (27 June 1941 - 13 March 1996) was a Polish director."),
    Passage("p5", "Cannes Film Festival", "The Palme d'Or is the highest prize of the Cannes Film Festival."),
]
BRIDGE = "What nationality is the director of Pulp Fiction?"  # templated: planned by rule
HOPS = ["Who directed Pulp Fiction?", "What nationality was #1?"]
FREE = "Which country does the man who directed Pulp Fiction come from?"  # no template: the planner LM plans it
SURE, UNSURE = [-0.05], [-1.0]  # P(answer) 0.95, 0.37


def reply(answer, lps=SURE):
    return {"answer": answer, "supporting_passages": [1], "_logprobs": {"answer": lps}}


class TitledRetriever(KeywordRetriever):
    """The keyword retriever plus a title lookup (what the evidence ranker's pool offers a chain)."""

    def __init__(self, passages=CORPUS):
        super().__init__(passages)
        self.titled: list[tuple[str, list[str]]] = []

    def with_titles(self, query, k, names):
        self.titled.append((query, list(names)))
        own = [p for p in self.passages if p.title.lower() in {n.lower() for n in names}]
        found = [p for p in self.retrieve(query, k) if p.id not in {o.id for o in own}]
        return [*own, *found][:k], [p.id for p in own]


def generator(answers):
    """The reader: ``answers[question]`` (a reply or a list given in turn), the draft's for the question."""
    queue = {q: list(a) if isinstance(a, list) else [a] for q, a in answers.items()}

    def rule(fields):
        todo = queue[fields["question"]]
        return todo.pop(0) if len(todo) > 1 else todo[0]

    return FieldLM("generator", rule)


def program(answers, hops=None, retriever=None, **over):
    config = SharpConfig(**{"ask_critic": "off", "repair_bridge": ("chain",), "accept_threshold": 0.9, **over})
    prog = SharpRAG(retriever or TitledRetriever(), config)
    planner = hops if isinstance(hops, GarbageLM) else FieldLM("planner", lambda f: {"hops": list(hops or [])})
    lms = {"generator": generator(answers), "planner": planner, "hop_planner": planner, "critic": GarbageLM("critic")}
    lms.update(composer=lms["generator"], focuser=lms["generator"])
    assign(prog, lms)
    return prog, lms


def steps(pred, role):
    return [s for s in pred.trace if s["role"] == role]


def rounds(pred):
    return [(s["action"], s["answer"]) for s in steps(pred, "judgement")]


CHAINED = {
    BRIDGE: reply("Quentin Tarantino", UNSURE),  # the wrong link: the film's director, not his nationality
    "Who directed Pulp Fiction?": reply("Quentin Tarantino"),
    "What nationality was Quentin Tarantino?": reply("American"),
}


# ---- plans ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "question,hops,relations",
    [
        (BRIDGE, HOPS, ["director", "nationality"]),
        ("Which country the director of film Thalavattam is from?", ["Who directed the film Thalavattam?",
         "Which country was #1 from?"], ["director", "country of citizenship"]),
        ("Where was the director of film Timber Falls born?", ["Who directed the film Timber Falls?",
         "Where was #1 born?"], ["director", "place of birth"]),
        ("Who is Edward Howard, 2Nd Earl Of Carlisle's paternal grandfather?", [
         "Who was the father of Edward Howard, 2Nd Earl Of Carlisle?", "Who was the father of #1?"], ["father", "father"]),
        ("Where was the place of burial of Charles Mathew's father?", ["Who was the father of Charles Mathew?",
         "Where was #1 buried?"], ["father", "place of burial"]),
        ("Who is the father-in-law of Aemilia Tertia?", ["Who was the spouse of Aemilia Tertia?",
         "Who was the father of #1?"], ["spouse", "father"]),
        ("Who is the father of the composer of song I Am The World?", ["Who composed the music of the song I Am "
         "The World?", "Who was the father of #1?"], ["composer", "father"]),
        ("Where was the husband of Octavie Coudreau born?", ["Who was the husband of Octavie Coudreau?",
         "Where was #1 born?"], ["spouse", "place of birth"]),
    ],
)  # fmt: skip
def test_templated_bridges_are_planned_by_rule_one_relation_a_hop(question, hops, relations):
    plan = rule_plan(question)
    assert plan is not None and list(plan.hops) == hops and list(plan.relations) == relations and plan.by == "rule"
    assert check_plan(plan.hops, question) is None
    assert Plan.from_record(plan.to_record()) == plan


@pytest.mark.parametrize("question", [
    "Who is the father of Alix, Princess Of Ligne?",  # one hop: the reader reads it directly
    "Who was born first, Quentin Tarantino or Krzysztof Kieslowski?",
    FREE,
])  # fmt: skip
def test_questions_without_a_chain_template_get_no_rule_plan(question):
    assert rule_plan(question) is None


@pytest.mark.parametrize(
    "hops,why",
    [
        (["Who directed Pulp Fiction?"], "1 hop(s): a chain has 2 to 4"),
        (["Who directed Pulp Fiction?", "Which country was Quentin Tarantino from?"], "hop 2 names no earlier answer"),
        (["Who directed #1?", "Where was #1 born?"], "hop 1 names an earlier answer"),
        (["Who directed Pulp Fiction?", "Where was #2 born?"], "hop 2 names #2, not an earlier hop's answer"),
        (["a?", "b #1?", "c #2?", "d #3?", "e #4?"], "5 hop(s)"),
        (["Who directed Pulp Fiction? Where was he born?", "x #1?"], "hop 1 asks two questions"),
        ([BRIDGE, "Where was #1 born?"], "hop 1 repeats the question"),
        (["Who directed Pulp Fiction?", ""], "hop 2 is empty"),
    ],
)
def test_a_plan_that_is_not_a_chain_is_refused_with_the_reason(hops, why):
    assert why in (check_plan(hops, BRIDGE) or "")


def test_substitution_and_the_loop_check():
    assert substitute("Where was #1 born, after #2?", ["Max Mack", "1900"]) == "Where was Max Mack born, after 1900?"
    assert loops_back("Pulp Fiction", "Who directed Pulp Fiction?")
    assert not loops_back("Quentin Tarantino", "Who directed Pulp Fiction?")
    # a person asked for: a part of the entity's name is the entity again
    assert loops_back("Alessandro Ruspoli", "Who was the father of Alessandro Ruspoli, 2Nd Prince Of Cerveteri?",
                      "Alessandro Ruspoli, 2Nd Prince Of Cerveteri")  # fmt: skip
    # a place named in the entity's name is an answer, not a loop; the entity itself always is one
    assert not loops_back("Staritsa", "Where was Vladimir of Staritsa born?", "Vladimir of Staritsa")
    assert loops_back("Vladimir of Staritsa", "Where was Vladimir of Staritsa born?", "Vladimir of Staritsa")


# ---- the chain, live ---------------------------------------------------------------------------------------------
def test_a_rejected_bridge_draft_is_chained_by_rule_each_hop_searched_with_the_last_answer_s_passage():
    prog, lms = program(CHAINED)
    pred = prog(question=BRIDGE)
    assert rounds(pred) == [("draft", "Quentin Tarantino"), ("chain", "American")]
    assert pred.answer == "American" and pred.stop_reason == "confident"
    assert pred.cost["lm_calls"] == 3 and lms["hop_planner"].calls == 0  # the draft and two hops: no planner call
    (plan,) = steps(pred, "planner")
    assert plan["by_rule"] and plan["hops"] == HOPS and plan["plan_by"] == "rule"
    searches = [s for s in steps(pred, "retriever") if s.get("hop")]
    assert [s["queries"] for s in searches] == [
        ["Who directed Pulp Fiction?"],
        ["What nationality was Quentin Tarantino?"],
    ]
    assert [s["titled"] for s in searches] == [
        ["Pulp Fiction"],
        ["Quentin Tarantino"],
    ]  # the entity, then hop 1's answer
    assert searches[1]["titled_ids"] == ["p2"]
    reads = [s for s in steps(pred, "generator") if s.get("hop")]
    assert [r["hop"] for r in reads] == [1, 2]
    assert {p.id for p in pred.passages} >= {"p1", "p2"}  # the union of the hops' passages


def test_an_untemplated_bridge_is_planned_by_the_planner_lm():
    answers = {**CHAINED, FREE: reply("Quentin Tarantino", UNSURE)}
    prog, lms = program(answers, hops=HOPS)
    pred = prog(question=FREE)
    assert pred.answer == "American" and pred.cost["lm_calls"] == 4  # draft, plan, two hops
    assert lms["hop_planner"].calls == 1 and lms["hop_planner"].rules.seen[0]["question"] == FREE
    (plan,) = steps(pred, "planner")
    assert plan["plan_by"] == "planner" and not plan.get("by_rule") and "refused" not in plan


@pytest.mark.parametrize(
    "hops,why",
    [
        (["Who directed Pulp Fiction?", "Which country was Quentin Tarantino from?"], "hop 2 names no earlier answer"),
        (["Who?", "a #1?", "b #2?", "c #3?", "d #4?"], "5 hop(s): a chain has 2 to 4"),
        (GarbageLM("planner"), "0 hop(s)"),  # a planner reply that does not parse
    ],
    ids=["no earlier answer", "five hops", "unparsed reply"],
)
def test_a_refused_plan_reads_no_hop_the_draft_stands_and_the_trace_says_why(hops, why):
    prog, lms = program({FREE: reply("Quentin Tarantino", UNSURE)}, hops=hops)
    pred = prog(question=FREE)
    assert pred.answer == "Quentin Tarantino" and pred.cost["lm_calls"] == 2  # the draft and the plan
    (plan,) = steps(pred, "planner")
    assert why in plan["refused"]
    chained = [s for s in steps(pred, "judgement") if s["action"] == "chain"]
    assert chained[0]["answer"] is None and why in chained[0]["fallback"]


@pytest.mark.parametrize(
    "hop1,why",
    [
        (reply("unknown"), "hop 1: answered nothing"),
        (reply("Pulp Fiction"), "the entity its question asks about (a loop)"),
        (reply("1994"), "is not what its question asks for (person)"),
        (reply("Stanley Kubrick"), "is not a span of its passages"),
    ],
)
def test_a_hop_without_a_usable_answer_stops_the_chain_and_the_draft_stands(hop1, why):
    prog, lms = program({**CHAINED, "Who directed Pulp Fiction?": hop1})
    pred = prog(question=BRIDGE)
    # the draft, hop 1 over the film's own passage, then over the hop's passages together
    assert pred.answer == "Quentin Tarantino" and pred.cost["lm_calls"] == 3
    hop1 = [s for s in steps(pred, "generator") if s.get("hop") == 1]
    assert [s.get("own", False) for s in hop1] == [True, False]
    (stop,) = steps(pred, "chain")
    assert why in stop["stopped"]


def test_a_hop_reads_the_entity_s_own_passage_alone_first_then_its_passages_together():
    """The 1.5B reader, given three passages, answers from a neighbour's a quarter of the time: the entity's own
    passage is read alone first; the hop's passages together only where that read finds no answer."""
    nationality = "What nationality was Quentin Tarantino?"
    own_first = {**CHAINED, nationality: [reply("unknown"), reply("American")]}
    prog, _ = program(own_first)
    pred = prog(question=BRIDGE)
    reads = [s for s in steps(pred, "generator") if s.get("hop")]
    assert [(s["hop"], s.get("own", False)) for s in reads] == [(1, True), (2, True), (2, False)]
    assert pred.answer == "American" and pred.cost["lm_calls"] == 4  # the draft, hop 1, hop 2 twice
    prog, _ = program(CHAINED)  # its own passage answers: one read a hop
    pred = prog(question=BRIDGE)
    assert pred.answer == "American" and pred.cost["lm_calls"] == 3
    assert [s["evidence_ids"] for s in steps(pred, "generator") if s.get("hop")] == [["p1"], ["p2"]]


def test_a_hop_whose_search_finds_nothing_stops_the_chain():
    class Empty(KeywordRetriever):
        def retrieve(self, query, k):
            return super().retrieve(query, k) if query == BRIDGE else []

    prog, _ = program(CHAINED, retriever=Empty(CORPUS))
    pred = prog(question=BRIDGE)
    assert (
        pred.answer == "Quentin Tarantino" and "hop 1: the search found nothing" in steps(pred, "chain")[0]["stopped"]
    )


def test_a_reworded_hop_answer_is_carried_as_its_passage_writes_it():
    prog, _ = program({**CHAINED, "Who directed Pulp Fiction?": reply("Quentin J. Tarantino")})
    pred = prog(question=BRIDGE)
    hop2 = [s for s in steps(pred, "retriever") if s.get("hop") == 2]
    assert hop2[0]["queries"] == ["What nationality was Quentin Tarantino?"] and pred.answer == "American"


def test_the_union_read_answers_the_whole_question_over_the_hops_passages():
    answers = {**CHAINED, BRIDGE: [reply("Quentin Tarantino", UNSURE), reply("American")]}
    prog, lms = program(answers, chain_answer="union")
    pred = prog(question=BRIDGE)
    assert pred.answer == "American" and pred.cost["lm_calls"] == 4  # draft, two hops, the union read
    (union,) = [s for s in steps(pred, "generator") if s["round"] == 1 and not s.get("hop")]
    assert union["answer"] == "American"
    chained = [s for s in steps(pred, "judgement") if s["action"] == "chain"]
    assert chained[0]["how"] == "union"


def test_a_chain_round_replays_as_it_ran_and_its_gate_features_describe_the_hops(tmp_path):
    import dspy

    from optimize.recording import complete, record
    from optimize.replay import replay
    from program.sharp.rounds import lookup_in

    examples = [dspy.Example(id="q0", question=BRIDGE, answer="American", answer_aliases=[]).with_inputs("question")]
    answers = {**CHAINED, BRIDGE: [reply("Quentin Tarantino", UNSURE), reply("Quentin Tarantino", [-0.01])]}
    prog, _ = program(answers)
    recs = record(prog, examples, path=tmp_path / "rec.jsonl", critique=False, actions=("chain",))
    assert [r["action"] for r in recs["q0"]["rounds"]] == ["draft", "chain"] and complete(recs["q0"], prog, ("chain",))
    chain = recs["q0"]["rounds"][1]
    assert chain["plan"]["by"] == "rule" and chain["hop_answers"] == ["Quentin Tarantino", "American"]
    assert chain["read"]["answer"] == "Quentin Tarantino"  # the union read, recorded so a replay may answer by it
    texts = lookup_in({p.id: p for p in CORPUS})
    for way, answer, calls in (("hop", "American", 3), ("union", "Quentin Tarantino", 4)):
        live = program(answers, chain_answer=way)[0](question=BRIDGE)
        replayed = replay(recs["q0"], prog.config.model_copy(update={"chain_answer": way}), texts)
        assert replayed.answer == live.answer == answer
        assert replayed.cost["lm_calls"] == live.cost["lm_calls"] == calls  # the union read counts where it is used
    judged = [s for s in replayed.trace if s["role"] == "judgement"]
    assert [j["action"] for j in judged] == ["draft", "chain"]


def test_gate_features_of_a_chain():
    from program.sharp.gate import round_features
    from program.sharp.loop import settle
    from program.sharp.rounds import Read, Round, Run

    hop1 = Read("Who directed Pulp Fiction?", "Quentin Tarantino", [CORPUS[0]], ["p1"], {"mean": -0.2, "min": -0.3,
                "first": 0.8})  # fmt: skip
    hop2 = Read("What nationality was Quentin Tarantino?", "American", [CORPUS[1]], ["p2"],
                {"mean": -0.05, "min": -0.1, "first": 0.95})  # fmt: skip
    rnd = Round(
        "chain", plan={"hops": HOPS, "by": "rule"}, hops=[hop1, hop2], hop_answers=["Quentin Tarantino", "American"]
    )
    run = Run(BRIDGE, "bridge")
    rnd.answer, rnd.how, rnd.why = settle(run, rnd, SharpConfig())
    f = round_features(run, rnd)
    assert (rnd.answer, rnd.how) == ("American", "chain")
    assert f["action_chain"] == 1.0 and f["chain_by_rule"] == 1.0 and f["hop_lp_min"] == -0.2
    assert f["hop_titled"] == 1.0 and f["hop_mismatch"] == 0.0 and f["lp_mean"] == -0.05  # the answer's own hop
    draft = Round("draft", read=Read(BRIDGE, "Quentin Tarantino", [CORPUS[0]], ["p1"], {"mean": -1.0, "min": -1,
                  "first": 0.4}))  # fmt: skip
    assert round_features(run, draft)["action_chain"] == 0.0 and round_features(run, draft)["hop_lp_min"] == 0.0


def test_a_program_saved_before_the_hop_planner_loads_with_it_uncompiled():
    from program.serving.saved import with_new_predictors

    prog, _ = program(CHAINED)
    prog.generator.demos = [dspy_example()]
    from program.serving.saved import without_lms

    state = without_lms(prog.dump_state())
    old = {k: v for k, v in state.items() if k != "hop_planner"}
    fresh = SharpRAG(TitledRetriever(), prog.config)
    fresh.load_state(with_new_predictors(old, fresh))
    assert len(fresh.generator.demos) == 1 and fresh.hop_planner.demos == []


def dspy_example():
    import dspy

    return dspy.Example(question="q", evidence="[1] A: a", answer="a", supporting_passages=[1])


def test_the_place_rule_keeps_a_place_s_first_part_for_a_where_question():
    from program.sharp.loop import settle
    from program.sharp.rounds import Read, Round, Run

    where = Run("Where was the director of film Timber Falls born?", "bridge")
    read = Round("draft", read=Read(where.question, "Medford, Massachusetts", [CORPUS[0]], [], None))
    assert settle(where, read, SharpConfig()).answer == "Medford, Massachusetts"
    first = settle(where, read, SharpConfig(place_rule="first"))
    assert (first.answer, first.how) == ("Medford", "place")
    when = Run("When was the director of film Timber Falls born?", "bridge")
    dated = Round("draft", read=Read(when.question, "March 27, 1963", [], [], None))
    assert settle(when, dated, SharpConfig(place_rule="first")).answer == "March 27, 1963"  # not a place question


def test_a_place_hop_answered_with_a_date_is_asked_once_more_for_the_kind_of_place():
    question = "Where was the director of Pulp Fiction born?"
    answers = {
        question: reply("Quentin Tarantino", UNSURE),
        "Who directed Pulp Fiction?": reply("Quentin Tarantino"),
        "Where was Quentin Tarantino born?": reply("March 27, 1963"),  # the date a person's passage gives first
        "In which city was Quentin Tarantino born?": reply("Knoxville"),
    }
    born = Passage("p2", "Quentin Tarantino", "Quentin Tarantino (born March 27, 1963 in Knoxville) is a director.")
    corpus = [born if p.id == "p2" else p for p in CORPUS]
    prog, _ = program(answers, retriever=TitledRetriever(corpus))
    pred = prog(question=question)
    assert pred.answer == "Knoxville" and pred.cost["lm_calls"] == 4  # draft, hop 1, hop 2 and its rewording
    (again,) = [s for s in steps(pred, "generator") if s.get("reworded")]
    assert again["hop"] == 2 and again["own"] and again["evidence_ids"] == ["p2"]  # the director's own passage
    # where his own passage does not say it: read again over the hop's passages, reworded there too
    corpus = [*CORPUS, Passage("p6", "Knoxville", "Quentin Tarantino was born in Knoxville, Tennessee.")]
    prog, _ = program(answers, retriever=TitledRetriever(corpus))
    pred = prog(question=question)
    assert pred.answer == "Knoxville" and pred.cost["lm_calls"] == 6
    assert [s.get("own", False) for s in steps(pred, "generator") if s.get("reworded")] == [True, False]
    assert reworded("Where did Max Mack die?") == "In which city did Max Mack die?" and reworded(HOPS[0]) is None


def test_a_hop_shows_hop_passage_chars_of_each_passage_and_every_other_read_passage_chars():
    """hop_passage_chars: a hop reads one entity's passage, whose asked fact often stands past the first
    passage_chars characters (issue 38's gold-hop-1 ceiling on 2Wiki train: 0.39 -> higher with whole passages)."""
    late = "Quentin Jerome Tarantino is a film director, screenwriter and actor from Knoxville, Tennessee. " * 2
    corpus = [*CORPUS[:1], Passage("p2", "Quentin Tarantino", late + "He holds American citizenship."), *CORPUS[2:]]
    seen: dict[str, list[str]] = {}

    def rule(fields):
        seen.setdefault(fields["question"], []).append(fields["evidence"])
        if fields["question"] == BRIDGE:
            return reply("Quentin Tarantino", UNSURE)
        if fields["question"] == "Who directed Pulp Fiction?":
            return reply("Quentin Tarantino")
        return reply("American" if "American citizenship" in fields["evidence"] else "unknown")

    def run(**over):
        seen.clear()
        prog, lms = program(CHAINED, retriever=TitledRetriever(corpus), passage_chars=120, **over)
        lms["generator"].rules.rule = rule
        return prog(question=BRIDGE)

    pred = run()  # every read cut at 120 characters: the hop cannot see the fact
    assert pred.answer == "Quentin Tarantino" and "hop 2: answered nothing" in steps(pred, "chain")[0]["stopped"]
    pred = run(hop_passage_chars=400)
    assert pred.answer == "American"
    nationality = seen["What nationality was Quentin Tarantino?"]
    assert nationality and all("American citizenship" in ev for ev in nationality)
    assert all("American citizenship" not in ev for ev in seen[BRIDGE])  # the draft still reads 120 characters


def test_hop_passage_chars_is_saved_and_digested_only_when_set(tmp_path):
    """A key added after programs were shipped: a program at its default saves to the same bytes (its MANIFEST
    sha256) and reads its recordings as before; set, it is saved, and only the chain's rounds read otherwise."""
    import json

    from optimize.recording import reading
    from program.serving.saved import save_program

    prog, _ = program(CHAINED)
    set_, _ = program(CHAINED, hop_passage_chars=3000)
    assert "hop_passage_chars" not in json.loads(save_program(tmp_path / "a.json", prog, "sharp").read_text())["config"]
    saved = json.loads(save_program(tmp_path / "b.json", set_, "sharp").read_text())["config"]
    assert saved["hop_passage_chars"] == 3000 and SharpConfig(**saved).hop_passage_chars == 3000
    assert reading(set_, "chain") != reading(prog, "chain")
    assert all(reading(set_, a) == reading(prog, a) for a in ("draft", "compare", "focus", "critic"))


# ---- the beam: hop 1's second answer carried through the later hops ------------------------------------------
BEAMED = {
    **CHAINED,
    # hop 1 unsure (P 0.37): read again over its passages that do not hold "Quentin Tarantino" (p3)
    "Who directed Pulp Fiction?": [reply("Quentin Tarantino", UNSURE), reply("Krzysztof Kieslowski")],
    "What nationality was Quentin Tarantino?": reply("unknown"),  # the first chain stops at hop 2
    "What nationality was Krzysztof Kieslowski?": reply("Polish"),
}


def test_an_unsure_hop_1_carries_its_second_answer_and_a_finished_branch_beats_a_stopped_chain():
    prog, _ = program(BEAMED, chain_beam=0.5)
    pred = prog(question=BRIDGE)
    assert pred.answer == "Polish" and rounds(pred)[-1] == ("chain", "Polish")
    # the draft; hop 1; hop 2 twice (its own passage, then together); the branch's hop 1 and hop 2
    assert pred.cost["lm_calls"] == 6
    branch_reads = [s for s in steps(pred, "generator") if s.get("beam")]
    assert [s["hop"] for s in branch_reads] == [1, 2] and branch_reads[0]["evidence_ids"] == ["p3"]  # without p1, p2
    (beam,) = [s for s in steps(pred, "chain") if s.get("beam") in ("first", "branch")]
    assert beam["beam"] == "branch" and beam["why"] == "the first chain stopped"
    assert beam["hop1"] == ["Quentin Tarantino", "Krzysztof Kieslowski"]
    assert {p.id for p in pred.passages} >= {"p3", "p4"}  # the branch's passages


def test_without_the_beam_or_with_a_sure_hop_1_no_branch_is_read():
    pred = program(BEAMED)[0](question=BRIDGE)  # chain_beam off: the first chain stopped, the draft stands
    assert pred.answer == "Quentin Tarantino" and pred.cost["lm_calls"] == 4
    sure = {**CHAINED, "Who directed Pulp Fiction?": reply("Quentin Tarantino", [-0.3])}  # P 0.74
    pred = program(sure, chain_beam=0.5)[0](question=BRIDGE)
    assert pred.answer == "American" and pred.cost["lm_calls"] == 3 and not any(s.get("beam") for s in pred.trace)


def test_a_tie_keeps_the_first_chain_and_a_stopped_branch_never_wins():
    both = {**BEAMED, "What nationality was Quentin Tarantino?": reply("American")}  # both chains finish
    pred = program(both, chain_beam=0.5)[0](question=BRIDGE)
    (beam,) = [s for s in steps(pred, "chain") if s.get("beam")]
    assert pred.answer == "American" and beam["beam"] == "first" and beam["p_gate"][0] == beam["p_gate"][1]
    stopped = {**both, "What nationality was Krzysztof Kieslowski?": reply("unknown")}
    pred = program(stopped, chain_beam=0.5)[0](question=BRIDGE)
    (beam,) = [s for s in steps(pred, "chain") if s.get("beam") in ("first", "branch")]
    assert pred.answer == "American" and beam["beam"] == "first" and "the branch stopped" in beam["why"]


def test_the_beam_is_recorded_once_and_replayed_at_any_threshold_its_calls_counted_only_where_it_runs(tmp_path):
    import dspy

    from optimize.recording import complete, record
    from optimize.replay import replay
    from program.sharp.rounds import ReplayError, lookup_in

    examples = [dspy.Example(id="q0", question=BRIDGE, answer="Polish", answer_aliases=[]).with_inputs("question")]
    plain, _ = program(BEAMED)
    recs = record(plain, examples, path=tmp_path / "plain.jsonl", critique=False, actions=("chain",))
    assert "branch" not in recs["q0"]["rounds"][1]  # a program without the beam reads no branch
    # (its reader's first hop-1 reply is the branch's: the chain's own is kept from the recording)
    beamed, lms = program({**BEAMED, "Who directed Pulp Fiction?": reply("Krzysztof Kieslowski")}, chain_beam=0.5)
    assert not complete(recs["q0"], beamed, ("chain",))  # its chains lack the branch: recorded again
    texts = lookup_in({p.id: p for p in CORPUS})
    with pytest.raises(ReplayError, match="chain_beam"):
        replay(recs["q0"], beamed.config, texts)
    before = lms["generator"].calls
    recs = record(beamed, examples, path=tmp_path / "plain.jsonl", critique=False, actions=("chain",))
    assert lms["generator"].calls - before == 2  # the branch's two reads alone: the draft and the chain were kept
    chain = recs["q0"]["rounds"][1]
    assert chain["hop_answers"] == ["Quentin Tarantino"] and chain["branch"]["hop_answers"] == [
        "Krzysztof Kieslowski", "Polish"]  # fmt: skip
    assert complete(recs["q0"], beamed, ("chain",))
    live = program(BEAMED, chain_beam=0.5)[0](question=BRIDGE)
    on = replay(recs["q0"], beamed.config, texts)
    assert on.answer == live.answer == "Polish" and on.cost["lm_calls"] == live.cost["lm_calls"] == 6
    off = replay(recs["q0"], beamed.config.model_copy(update={"chain_beam": None}), texts)
    assert off.answer == "Quentin Tarantino" and off.cost["lm_calls"] == 4  # the branch's calls not counted
    below = replay(recs["q0"], beamed.config.model_copy(update={"chain_beam": 0.2}), texts)  # hop 1's P 0.37
    assert below.answer == "Quentin Tarantino" and below.cost["lm_calls"] == 4


def test_the_beam_is_refused_with_the_union_read_and_saved_only_when_set(tmp_path):
    import json

    from optimize.recording import reading
    from program.serving.saved import save_program

    with pytest.raises(ValueError, match="the beam needs chain_answer: hop"):
        SharpConfig(chain_beam=0.5, chain_answer="union")
    prog, _ = program(CHAINED)
    beamed, _ = program(CHAINED, chain_beam=0.5)
    assert "chain_beam" not in json.loads(save_program(tmp_path / "a.json", prog, "sharp").read_text())["config"]
    assert json.loads(save_program(tmp_path / "b.json", beamed, "sharp").read_text())["config"]["chain_beam"] == 0.5
    assert all(reading(beamed, a) == reading(prog, a) for a in ("draft", "compare", "focus", "critic", "chain"))
