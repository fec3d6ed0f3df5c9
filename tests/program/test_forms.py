"""A question's form and a choice question's options, read from its text (HotpotQA and 2WikiMultihopQA
questions as they are written)."""

from __future__ import annotations

import pytest

from program.sharp.forms import matches_option, options, question_form


@pytest.mark.parametrize(
    "question,expected",
    [
        # HotpotQA comparisons
        (
            "Which magazine was started first Arthur's Magazine or First for Women?",
            ["Arthur's Magazine", "First for Women"],
        ),
        ("Who was born first, Pablo Trapero or Aleksander Ford?", ["Pablo Trapero", "Aleksander Ford"]),
        ("Which genus has more species, Sansevieria or Polianthes?", ["Sansevieria", "Polianthes"]),
        (
            "Which band was formed first, the band Sleeping with Sirens or the band Dr. Feelgood?",
            ["Sleeping with Sirens", "Dr. Feelgood"],
        ),
        # 2WikiMultihopQA comparisons
        ("Which film came out first, Blind Shaft or The Mask Of Fu Manchu?", ["Blind Shaft", "The Mask Of Fu Manchu"]),
        (
            "Which film has the director who died later, The Last Days Of Pompeii or Kiss Me Again?",
            ["The Last Days Of Pompeii", "Kiss Me Again"],
        ),
        ("Who lived longer, Theodor Haecker or Harry Vaughan Watkins?", ["Theodor Haecker", "Harry Vaughan Watkins"]),
        ("Which is the most populous: Amsterdam or Utrecht?", ["Amsterdam", "Utrecht"]),
        # no options: yes/no questions, bridges, an "or" inside a bridge
        ("Were Scott Derrickson and Ed Wood of the same nationality?", []),
        ("Is Paris the capital of France or of Germany?", []),
        ("Who wrote the novel or short story that the film Blade Runner is based on?", []),
        ("What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?", []),
    ],
)
def test_options_of_a_choice_question(question, expected):
    assert options(question) == expected


@pytest.mark.parametrize(
    "question,form",
    [
        ("Who was born first, Pablo Trapero or Aleksander Ford?", "comparison"),
        ("Which film came out first, Blind Shaft or The Mask Of Fu Manchu?", "comparison"),
        ("Which magazine was started first Arthur's Magazine or First for Women?", "comparison"),
        ("Were Scott Derrickson and Ed Wood of the same nationality?", "yesno"),
        ("Are both Kurram Garhi and Trojkrsti located in the same country?", "yesno"),
        ("Is Paris the capital of France or of Germany?", "yesno"),
        ("Do both films, Lethal Weapon and Die Hard, have the same director?", "yesno"),
        (
            "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
            "bridge",
        ),
        ("Who is the paternal grandfather of Ferdinand I Of Bulgaria?", "bridge"),
        ("Who wrote the novel or short story that the film Blade Runner is based on?", "bridge"),
    ],
)
def test_question_form(question, form):
    assert question_form(question) == form


def test_an_answer_matches_an_option_by_its_words_not_its_case_or_punctuation():
    opts = ["Arthur's Magazine", "First for Women"]
    assert matches_option("arthur's magazine", opts) and matches_option("First For Women.", opts)
    assert matches_option("Arthur's", opts)  # one contains the other
    assert not matches_option("Cosmopolitan", opts) and not matches_option("", opts)
    assert not matches_option("Paris", [])
