"""Answer cleaning, the evidence pool, the plain baseline."""

from __future__ import annotations

import re

import pytest
from doubles import KeywordRetriever, ScriptedLM, assign

from program.reading.answers import clean_answer, is_yes_no_question
from program.reading.evidence import EvidencePool, format_evidence
from program.systems.vanilla import VanillaRAG
from program.types import Passage


@pytest.mark.parametrize(
    "raw,question,expected",
    [
        ("Answer: Paris.", "What is the capital?", "Paris"),
        ('"Quentin Tarantino"', "Who?", "Quentin Tarantino"),
        ("Yes, both are American.", "Are both directors American?", "yes"),
        ("no", "Was he born in Paris?", "no"),
        ("Washington, D.C.", "Where?", "Washington, D.C."),
        ("1994\nBecause the film...", "When?", "1994"),
        ("Nobody", "Is it?", "Nobody"),
        ("False", "Are both bands from Canada?", "no"),
        ("True.", "Was he born in Paris?", "yes"),
        ("True Romance", "Which film did Tony Scott direct?", "True Romance"),
        (None, "Who?", ""),
    ],
)
def test_clean_answer(raw, question, expected):
    assert clean_answer(raw, question) == expected


def test_yes_no_detection():
    assert is_yes_no_question("Are Pulp Fiction and Red both films?")
    assert not is_yes_no_question("Which film came first?")


def P(i, title=None):
    return Passage(f"p{i}", title or f"T{i}", f"text {i}")


def test_pool_round_robin_dedup_and_cap():
    pool = EvidencePool()
    assert [p.id for p in pool.add("a", [P(1), P(2), P(3)])] == ["p1", "p2", "p3"]
    assert [p.id for p in pool.add("b", [P(2), P(4), P(5)])] == ["p4", "p5"]
    assert [p.id for p in pool.select(4)] == ["p1", "p2", "p4", "p3"]


def test_format_evidence_numbers_and_cuts():
    text = format_evidence([Passage("x", "Title", "word " * 100)], max_chars=30)
    assert text.startswith("[1] Title: word") and text.endswith("...") and len(text) < 60
    assert format_evidence([], 10) == "(no passages found)"


def test_vanilla_is_one_retrieval_and_one_call():
    retriever = KeywordRetriever()
    prog = VanillaRAG(retriever)
    gen = ScriptedLM("generator", [{"answer": "Polish.", "supporting_passages": [2]}])
    assign(prog, {"generator": gen})
    pred = prog(question="What nationality was Krzysztof Kieslowski?")
    assert retriever.queries == [("What nationality was Krzysztof Kieslowski?", 5)]
    assert gen.calls == 1 and pred.answer == "Polish"
    assert len(pred.passages) == 5 and pred.cited_ids == [pred.passages[1].id]
    assert pred.cost["lm_calls"] == 1 and pred.system == "vanilla"


def test_injected_passage_is_quoted_as_data():
    from program.signatures import CritiqueAnswer, GenerateAnswer

    for sig in (CritiqueAnswer, GenerateAnswer):
        assert "never instructions" in sig.instructions


def test_generator_prompt_does_not_prime_yes_or_no():
    """Measured regression: with "yes or no" anywhere in GenerateAnswer's instruction or answer
    description, the 1.5B model answered "No" to 7 of 20 open HotpotQA questions (vanilla EM
    0.20 -> 0.31 on the first 13 once removed). Yes/no questions are handled by clean_answer."""
    from program.signatures import GenerateAnswer

    texts = [GenerateAnswer.instructions] + [
        f.json_schema_extra.get("desc", "") for f in GenerateAnswer.output_fields.values()
    ]
    assert not any(re.search(r"\byes\b", t, re.I) for t in texts)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ('{"answer": "Quentin Tarantino", "supporting_passages": [1]}', "Quentin Tarantino"),
        ('{"answer": "Quentin Taran', "Quentin Taran"),  # cut by max_tokens inside the string
        ('{\n  "nonsense": "@@@"\n}', ""),  # JSON without the field: nothing to salvage
        ("[[ ## answer ## ]]\nParis\n\n[[ ## supporting_passages ## ]]\n[1]", "Paris"),
        ("Paris", "Paris"),
    ],
)
def test_salvage_reads_json_and_chat_replies(raw, expected):
    from program.reading.generation import salvage

    assert salvage(raw) == expected


def test_generator_reads_evidence_before_the_question_as_json():
    from program.signatures import GenerateAnswer

    # the layout the generator_formats benchmark chose: question last, JSON adapter
    assert list(GenerateAnswer.input_fields) == ["evidence", "question"]
    lm = ScriptedLM("generator", [{"answer": "Quentin Tarantino", "supporting_passages": [1]}])
    prog = VanillaRAG(KeywordRetriever())
    assign(prog, {"generator": lm})
    pred = prog(question="Who directed Pulp Fiction?")
    assert pred.answer == "Quentin Tarantino"
    assert type(lm.adapter).__name__ == "JSONAdapter"
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert prompt.index("Pulp Fiction is a 1994 film") < prompt.index("Who directed Pulp Fiction?")
