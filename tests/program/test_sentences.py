"""Sentence evidence: the selector's features and choice, its fit on supporting facts, the draft that reads
sentences, and a selector of another corpus refused by name."""

from __future__ import annotations

import pytest
from doubles import FieldLM, KeywordRetriever, assign

from optimize.sentences import coverage, fit_selector, sentence_cases
from program.errors import ConfigError
from program.sharp.gate import check_calibrators
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig
from program.sharp.sentences import SelectorError, SentenceSelector, select_sentences, split_sentences
from program.types import Passage

FILM = Passage("p1", "Pulp Fiction", "Pulp Fiction is a 1994 film. It was directed by Quentin Tarantino. "
               "It stars John Travolta. It won the Palme d'Or.", 0.9)  # fmt: skip
DIRECTOR = Passage("p2", "Quentin Tarantino", "Quentin Tarantino is an American director. He was born in "
                   "Knoxville. He grew up in Los Angeles.", 0.6)  # fmt: skip
QUESTION = "Where was the director of Pulp Fiction born?"
GOLD = {"Pulp Fiction": ["It was directed by Quentin Tarantino."], "Quentin Tarantino": ["He was born in Knoxville."]}


def selector(corpus="c0ffee", dataset="hotpotqa"):
    cases = sentence_cases(QUESTION, [FILM, DIRECTOR], GOLD) * 3
    return fit_selector(cases, {"dataset": dataset, "corpus_sha256": corpus})


def test_sentences_are_split_at_stops_before_capitals():
    assert split_sentences(FILM.text) == [
        "Pulp Fiction is a 1994 film.",
        "It was directed by Quentin Tarantino.",
        "It stars John Travolta.",
        "It won the Palme d'Or.",
    ]
    assert split_sentences("Born 1963 in St. louis, he moved.") == ["Born 1963 in St. louis, he moved."]


def test_cases_label_the_supporting_sentences_and_the_fit_prefers_them():
    cases = sentence_cases(QUESTION, [FILM, DIRECTOR], GOLD)
    assert [c["label"] for c in cases] == [False, True, False, False, False, True, False]
    sel = selector()
    chosen = select_sentences(QUESTION, [FILM, DIRECTOR], sel, budget=4)
    # each passage's first sentence, then the two supporting ones: the budget, in each passage's order
    assert [p.text for p in chosen] == [
        "Pulp Fiction is a 1994 film. It was directed by Quentin Tarantino.",
        "Quentin Tarantino is an American director. He was born in Knoxville.",
    ]
    assert [(p.id, p.score) for p in chosen] == [("p1", 0.9), ("p2", 0.6)]
    shown = coverage([(QUESTION, [FILM, DIRECTOR], GOLD)], sel, 4, 0)
    assert shown["gold_sentence_recall"] == 1.0 and shown["all_gold_sentences"] == 1.0
    assert coverage([(QUESTION, [FILM, DIRECTOR], GOLD)], None, 4, 1)["gold_sentence_recall"] == 0.5


def test_the_draft_reads_the_chosen_sentences_and_judges_against_the_whole_passages():
    seen = []

    def generator(fields):
        seen.append(fields["evidence"])
        return {"answer": "Knoxville", "supporting_passages": [2], "_logprobs": {"answer": [-0.1]}}

    config = SharpConfig(ask_critic="off", evidence="sentences", selector=selector(), sentence_passages=2,
                         sentence_budget=4, max_repairs=0)  # fmt: skip
    prog = SharpRAG(KeywordRetriever([FILM, DIRECTOR]), config)
    assign(
        prog,
        {r: FieldLM(r, generator) for r in ("planner", "critic", "generator", "composer", "focuser", "hop_planner")},
    )
    pred = prog(question=QUESTION)
    assert "John Travolta" not in seen[0] and "born in Knoxville" in seen[0]
    assert pred.answer == "Knoxville" and pred.cited_ids == ["p2"]
    assert sorted(p.text for p in pred.passages) == sorted([FILM.text, DIRECTOR.text])  # whole, as retrieved
    assert next(s for s in pred.trace if s["role"] == "generator")["sentences"] == 4


def test_sentence_evidence_needs_a_selector_and_a_selector_of_another_corpus_is_refused_naming_both():
    with pytest.raises(ConfigError, match="reading sentences needs a fitted sentence selector"):
        SharpConfig.from_mapping({"evidence": "sentences"})
    config = SharpConfig(selector=selector(corpus="a" * 64, dataset="hotpotqa"))
    check_calibrators(config, "a" * 64, None, "hotpotqa")
    with pytest.raises(SelectorError, match="fitted on dataset 'hotpotqa' .* this index holds dataset 'musique'"):
        check_calibrators(config, "b" * 64, None, "musique")
    data = selector().model_dump(mode="json")
    data["weights"][0] += 1.0
    with pytest.raises(ConfigError, match="sentence selector's numbers do not match its digest"):
        SentenceSelector.from_mapping(data)
