"""The hop planner's compile (optimize/planner.py): demos from gold and rule plans, the plan metric, what goes
back into the program; and the program reading only the question, never a gold field of its example."""

from __future__ import annotations

import dspy
import pytest
from doubles import FieldLM, KeywordRetriever, assign

from optimize.compiler import compile_program
from optimize.planner import (
    PlannerStudent,
    demo_examples,
    gold_answers_for,
    install,
    natural_hop,
    plan_feedback,
    plan_metric,
    plannable,
    planner_examples,
    score_plans,
)
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig
from program.types import Passage

CORPUS = [
    Passage("p1", "Journal of Psychotherapy Integration", "It is published by the American Psychological Association."),
    Passage("p2", "American Psychological Association", "Its first president was G. Stanley Hall."),
    Passage("p3", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino."),
]


def example(question, answer="", gold_hops=(), gold_titles=(), id="x"):
    return dspy.Example(id=id, question=question, answer=answer, answer_aliases=[], gold_hops=list(gold_hops),
                        gold_titles=list(gold_titles)).with_inputs("question")  # fmt: skip


MUSIQUE = example(
    "Who was the first president of the association which published Journal of Psychotherapy Integration?",
    "G. Stanley Hall",
    [("Journal of Psychotherapy Integration >> publisher", "American Psychological Association"),
     ("Who was the first president of #1 ?", "G. Stanley Hall")],
    ["Journal of Psychotherapy Integration", "American Psychological Association"],
    id="m1",
)  # fmt: skip
WIKI = example("Where was the director of film Pulp Fiction born?", id="w1")
HOTPOT = example(
    "Who was the first president of the group that publishes the Journal of Psychotherapy Integration?",
    gold_titles=["Journal of Psychotherapy Integration", "American Psychological Association"],
    id="h1",
)


def test_gold_decompositions_and_rule_plans_become_demos_in_natural_questions():
    assert natural_hop("Hello Love >> performer") == "Who performed Hello Love?"
    assert natural_hop("Bubye River >> country") == "Which country is Bubye River in?"
    assert natural_hop("#1 >> shares border with") == "What is the shares border with of #1?"
    assert natural_hop("Who was the first president of #1 ?") == "Who was the first president of #1?"
    # an evidence triple's hop (2Wiki's evidences, a dataset folder's), where its relation is a known one
    assert natural_hop("place of birth of #1") == "Where was #1 born?"
    assert natural_hop("author of The Pale King") == "Who wrote The Pale King?"
    assert natural_hop("shares border with of #1") == "Shares border with of #1"  # unknown: kept as written
    demos = demo_examples([MUSIQUE, WIKI, example("Who directed Pulp Fiction?")])  # the last: one hop, no demo
    assert [d.hops for d in demos] == [
        ["Who published Journal of Psychotherapy Integration?", "Who was the first president of #1?"],
        ["Who directed the film Pulp Fiction?", "Where was #1 born?"],
    ]
    assert demos[0].gold_titles and demos[0].id == "m1"
    assert plannable([MUSIQUE, WIKI, HOTPOT]) == [MUSIQUE, HOTPOT]  # a rule plan needs no planner


def test_the_gold_answers_a_plan_is_scored_with():
    assert gold_answers_for(MUSIQUE, 2) == ["American Psychological Association"]
    assert gold_answers_for(MUSIQUE, 4) is None  # more hops than the gold decomposition knows answers for
    # HotpotQA: the bridge entity is the gold title the question does not name
    assert gold_answers_for(HOTPOT, 2) == ["American Psychological Association"]
    assert gold_answers_for(HOTPOT, 3) is None


def test_the_plan_metric_scores_validity_then_what_the_hops_find():
    retriever = KeywordRetriever(CORPUS)
    metric = plan_metric(retriever.retrieve, k=1)
    good = dspy.Prediction(
        hops=["Who publishes Journal of Psychotherapy Integration?", "Who was the first president of #1?"]
    )
    assert metric(HOTPOT, good) == 1.0  # both gold paragraphs found, #1 written in as the bridge entity
    off = dspy.Prediction(hops=["Who directed Pulp Fiction?", "Where was #1 born?"])
    assert metric(HOTPOT, off) == 0.75  # valid; only the bridge entity, written in for #1, finds its paragraph
    assert metric(HOTPOT, dspy.Prediction(hops=["Who publishes it?", "Who was its first president?"])) == 0.0
    assert plan_metric()(MUSIQUE, good) == 1.0 and plan_metric()(MUSIQUE, dspy.Prediction(hops=["a?", "b #1?",
                                                                                               "c #2?"])) == 0.5  # fmt: skip


def test_the_feedback_metric_says_why_a_plan_failed_for_gepa():
    feedback = plan_feedback(KeywordRetriever(CORPUS).retrieve, k=1)
    off = dspy.Prediction(hops=["Who directed Pulp Fiction?", "Where was #1 born?"])
    out = feedback(HOTPOT, off, None, "hop_planner", None)  # GEPA's five arguments
    assert out.score == plan_metric(KeywordRetriever(CORPUS).retrieve, k=1)(HOTPOT, off) == 0.75
    assert "never found the paragraph(s) ['Journal of Psychotherapy Integration']" in out.feedback
    assert "'Who directed Pulp Fiction?' found ['Pulp Fiction']" in out.feedback  # each hop as it was searched
    refused = feedback(MUSIQUE, dspy.Prediction(hops=[MUSIQUE.question]))
    assert refused.score == 0.0 and "was refused: 1 hop(s)" in refused.feedback
    assert (
        "A plan of this question that works: ['Who published Journal of Psychotherapy Integration?'" in refused.feedback
    )
    good = dspy.Prediction(
        hops=["Who publishes Journal of Psychotherapy Integration?", "Who was the first president of #1?"]
    )
    assert feedback(HOTPOT, good).feedback.endswith("found every paragraph the answer needs.")
    assert plan_feedback()(HOTPOT, good).feedback == "The plan is valid (2 hops)."  # no search: no titles to judge


def test_gepa_compiles_the_planner_on_the_feedback_metric():
    """`sharp compile --target planner --optimizer gepa` (refused before: no feedback metric): the reflection
    LM reads why a plan failed, and the instruction it writes goes back into the program where it pays."""
    good = ["Who publishes Journal of Psychotherapy Integration?", "Who was the first president of #1?"]

    def plan(fields, system):  # one hop (refused) until the instructions ask for single questions naming #1
        return {"hops": good if "names #1" in system else [fields["question"]]}

    plan.reads_system = True
    prompts: list[str] = []

    def reflect(fields, system):
        prompts.append(str(fields) + system)
        return {"new_instruction": "Write single questions; hop 2 names #1."}

    reflect.reads_system = True
    prog = SharpRAG(KeywordRetriever(CORPUS), SharpConfig())
    student = PlannerStudent(prog.hop_planner)
    assign(student, {"hop_planner": FieldLM("planner", plan)})
    search = KeywordRetriever(CORPUS).retrieve
    valset = planner_examples([HOTPOT])
    trainset = planner_examples(
        [example(HOTPOT.question, gold_titles=HOTPOT.gold_titles, id=f"h{i}") for i in range(3)]
    )
    result = compile_program(student, "gepa", trainset, valset, metric=plan_metric(search, 1),
                             feedback_metric=plan_feedback(search, 1), proposer_lm=FieldLM("proposer", reflect),
                             overrides={"max_metric_calls": 6, "reflection_minibatch_size": 1})  # fmt: skip
    assert any("was refused: 1 hop(s)" in p for p in prompts)  # the feedback reached the reflection
    assert "names #1" in result.program.hop_planner.signature.instructions
    assert score_plans(result.program, valset, plan_metric(search, 1))["valid"] == 1.0
    # what GEPA tried is reported: the program as it came (candidate 0, refused plans: score 0), then the
    # reflection's instruction, which scored higher and was kept
    tried = result.search
    assert tried is not None and len(tried["candidates"]) >= 2 and tried["examples"] == 1
    first, kept = tried["candidates"][0], tried["candidates"][tried["kept"]]
    assert tried["kept"] != 0 and kept["score"] > first["score"] == 0.0
    assert "names #1" in kept["instructions"]["hop_planner"] and "names #1" not in first["instructions"]["hop_planner"]
    assert kept["parents"] == [0] and tried["metric_calls"] <= 6 + 1


def test_an_optimizer_that_keeps_no_candidates_reports_no_search():
    prog = SharpRAG(KeywordRetriever(CORPUS), SharpConfig())
    student = PlannerStudent(prog.hop_planner)
    result = compile_program(
        student, "labeled", demo_examples([MUSIQUE, WIKI]), metric=plan_metric(), overrides={"k": 2}
    )
    assert result.search is None


def test_a_compiled_planner_goes_back_into_the_program_without_its_demos_gold_fields():
    prog = SharpRAG(KeywordRetriever(CORPUS), SharpConfig())
    planner = FieldLM("planner", lambda f: {"hops": ["Who publishes Journal of Psychotherapy Integration?",
                                                     "Who was the first president of #1?"]})  # fmt: skip
    student = PlannerStudent(prog.hop_planner)
    assign(student, {"hop_planner": planner})
    demos = demo_examples([MUSIQUE, WIKI])
    result = compile_program(student, "labeled", demos, metric=plan_metric(), overrides={"k": 2})
    ids = install(prog, result.program)
    assert sorted(ids) == ["m1", "w1"] and prog.hop_planner.demos
    assert all(set(d.keys()) == {"question", "hops"} for d in prog.hop_planner.demos)  # no gold field inside
    assert prog.generator.demos == [] and prog.planner.demos == []  # the other predictors as they were
    report = score_plans(result.program, planner_examples([HOTPOT]), plan_metric(KeywordRetriever(CORPUS).retrieve, 1))
    assert report == {"questions": 1, "metric": 1.0, "valid": 1.0, "hops_per_plan": 2.0}


POISON = "ZZZ-GOLD-ZZZ"


@pytest.mark.parametrize("field", ["gold_hops", "gold_titles", "answer", "type"])
def test_the_program_reads_the_question_alone_never_a_gold_field(field):
    """MuSiQue's question_decomposition (gold_hops), HotpotQA's type, the gold answer and titles are read by
    scoring and train-side compiling alone: no prompt of a run over such an example holds them."""
    from optimize.evaluate import evaluate

    seen: list[str] = []

    def rule(fields):
        seen.append(repr(fields))
        return {"answer": "Quentin Tarantino", "supporting_passages": [1], "hops": ["Who directed Pulp Fiction?",
                "Where was #1 born?"], "_logprobs": {"answer": [-1.0]}}  # fmt: skip

    prog = SharpRAG(KeywordRetriever(CORPUS), SharpConfig(repair_bridge=("chain",), accept_threshold=0.99))
    lm = FieldLM("any", rule)
    assign(prog, {n: lm for n in ("planner", "critic", "generator", "composer", "focuser", "hop_planner")})
    poisoned = {"gold_hops": [(POISON, POISON)], "gold_titles": [POISON], "answer": POISON, "type": POISON}
    ex = dspy.Example(id="q", question="Who published the journal that Pulp Fiction's director read?",
                      answer="x", answer_aliases=[], gold_titles=[], gold_hops=[], type=None)  # fmt: skip
    ex = ex.copy(**{field: poisoned[field]}).with_inputs("question")
    evaluate(prog, [ex], progress=False)
    assert seen and not [s for s in seen if POISON in s]
