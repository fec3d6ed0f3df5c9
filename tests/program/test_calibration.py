"""The answer critic's features of a round, its calibrators as plain numbers, and their checks."""

from __future__ import annotations

import math

import pytest

from program.errors import ConfigError
from program.sharp.forms import question_form
from program.sharp.gate import (
    CRITIC_FEATURES,
    GATE_FEATURES,
    MISSING_LOGPROB,
    AnswerCalibrator,
    CalibratorError,
    critic_features,
    round_features,
)
from program.sharp.loop import gate_probability
from program.sharp.policy import UNCALIBRATED_P, SharpConfig
from program.sharp.rounds import Read, Round, Run
from program.types import Passage

BRIDGE = "Who directed Pulp Fiction?"
CHOICE = "Who was born first, Quentin Tarantino or Krzysztof Kieslowski?"
YESNO = "Were Quentin Tarantino and Krzysztof Kieslowski of the same nationality?"
EVIDENCE = [
    Passage("p1", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino.", 0.2),
    Passage("p2", "Quentin Tarantino", "Quentin Tarantino is an American film director.", 0.9),
]
SURE = {"mean": -0.2, "min": -0.5, "first": 0.9, "tokens": 3.0}


def features(answer, question=BRIDGE, action="draft", first_answer=None, cited=("p1",), top=None, **kw):
    """The features of a round of ``action`` answering ``answer`` over EVIDENCE (after a draft that answered
    ``first_answer``, when given)."""
    run = Run(question, question_form(question))
    if first_answer is not None:
        run.rounds.append(Round("draft", read=Read(question, first_answer, EVIDENCE), answer=first_answer))
    read = Read(question, answer, EVIDENCE, list(cited), kw.pop("confidence", SURE), top)
    return round_features(run, Round(action, read=read, answer=answer, how=kw.pop("how", "read")))


def test_the_features_of_a_draft_read_what_the_round_knows():
    f = features("Quentin Tarantino.")
    assert set(f) == set(GATE_FEATURES)
    assert (f["lp_mean"], f["lp_min"], f["p_first"], f["lp_missing"]) == (-0.2, -0.5, 0.9, 0.0)
    assert (f["in_evidence"], f["in_question"], f["unknown"], f["answer_words"]) == (1.0, 0.0, 0.0, 2.0)
    assert (f["score_1"], f["score_2"], f["score_3"]) == (0.9, 0.2, 0.0)  # the ranker's, best first
    assert (f["form_comparison"], f["form_yesno"], f["option_miss"], f["yesno_mismatch"]) == (0.0, 0.0, 0.0, 0.0)
    assert (f["action_retrieve"], f["action_compare"], f["action_focus"], f["agrees_draft"]) == (0.0, 0.0, 0.0, 0.0)
    # the answer is in the passage it cites, is the title of a passage the question does not name (the sign
    # of an answer that stopped at the intermediate entity), and is a name where a person is asked
    assert (f["in_cited"], f["names_passage"], f["type_mismatch"], f["by_code"]) == (1.0, 1.0, 0.0, 0.0)


@pytest.mark.parametrize(
    "answer,question,key,value",
    [
        ("Steven Spielberg", BRIDGE, "in_evidence", 0.0),
        ("american", BRIDGE, "in_evidence", 1.0),  # case aside
        ("Pulp Fiction", BRIDGE, "in_question", 1.0),  # a bridge answered with its own entity
        ("unknown", BRIDGE, "unknown", 1.0),
        ("", BRIDGE, "unknown", 1.0),
        ("Steven Spielberg", CHOICE, "option_miss", 1.0),  # neither option
        ("Kieslowski", CHOICE, "option_miss", 0.0),  # a part of an option names it
        ("Quentin Tarantino", CHOICE, "form_comparison", 1.0),
        ("American", YESNO, "yesno_mismatch", 1.0),  # a yes/no question not answered yes or no
        ("No.", YESNO, "yesno_mismatch", 0.0),
        ("no", BRIDGE, "yesno_mismatch", 1.0),  # a yes/no answer to a bridge question
        ("no", YESNO, "form_yesno", 1.0),
        ("word " * 30, BRIDGE, "answer_words", 20.0),  # capped
        ("1994", BRIDGE, "type_mismatch", 1.0),  # a year where a person is asked
        ("Pulp Fiction", BRIDGE, "names_passage", 0.0),  # the question names that passage
        ("American", BRIDGE, "in_cited", 0.0),  # in the evidence, not in the passage cited
    ],
)
def test_one_feature_on_a_small_case(answer, question, key, value):
    assert features(answer, question)[key] == value


def test_a_repair_that_agrees_with_the_first_draft_is_marked():
    assert features("American.", action="retrieve", first_answer="american")["agrees_draft"] == 1.0
    assert features("American", action="retrieve", first_answer="Polish")["agrees_draft"] == 0.0
    assert features("American", action="draft")["agrees_draft"] == 0.0
    f = features("yes", YESNO, action="focus", first_answer="no")
    assert (f["action_focus"], f["action_retrieve"], f["agrees_draft"]) == (1.0, 0.0, 0.0)


def test_the_yes_no_margin_and_how_code_settled_the_answer():
    f = features("yes", YESNO, top=[("yes", math.log(0.8)), ("no", math.log(0.2))], how="p_yes")
    assert f["yes_margin"] == pytest.approx(0.6) and f["by_code"] == 1.0
    assert features("yes", YESNO)["yes_margin"] == 0.0  # no log-probabilities: no margin


def test_without_log_probabilities_the_confidence_features_are_an_average_reading_and_flagged():
    f = features("Quentin Tarantino", confidence=None)
    assert f["lp_missing"] == 1.0 and f["lp_mean"] == f["lp_min"] == MISSING_LOGPROB
    assert f["p_first"] == pytest.approx(math.exp(MISSING_LOGPROB))
    assert gate_probability(f, SharpConfig()) == UNCALIBRATED_P  # no gate: a coin flip, not exp(-0.5)
    assert gate_probability(features("x"), SharpConfig()) == pytest.approx(math.exp(-0.2))


def test_critic_features_read_a_usable_critique_only():
    assert critic_features(None) is None
    assert critic_features({"verdict": None, "p_supported": None, "critic_problem": "unparseable"}) is None
    f = critic_features({"verdict": "incomplete", "p_supported": 0.2})
    assert f == {"p_supported": 0.2, "said_supported": 0.0, "said_incomplete": 1.0}
    assert set(f) == set(CRITIC_FEATURES)


def calibrator(features=("lp_mean", "in_evidence"), weights=(2.0, 1.0), **fitted_on):
    n = len(features)
    return AnswerCalibrator.make(features, [0.0] * n, [1.0] * n, weights, -0.5, fitted_on)


def test_a_gate_drives_the_loops_probability_and_survives_the_configs_round_trip():
    gate = calibrator(dataset="hotpotqa")
    cfg = SharpConfig(gate=gate)
    f = features("Quentin Tarantino")
    expected = 1 / (1 + math.exp(-(-0.5 + 2.0 * -0.2 + 1.0 * 1.0)))
    assert gate_probability(f, cfg) == pytest.approx(expected)
    again = SharpConfig.from_mapping(cfg.model_dump(mode="json"))
    assert again.gate == gate and gate_probability(f, again) == pytest.approx(expected)
    assert not gate.needs_critic and calibrator(("lp_mean", "p_supported"), (1.0, 1.0)).needs_critic


def test_an_edited_or_unknown_calibrator_is_refused_naming_how_to_refit():
    data = calibrator().model_dump(mode="json")
    data["weights"][0] += 1.0
    with pytest.raises(ConfigError, match="do not match its digest.*sharp compile --target critic"):
        SharpConfig.from_mapping({"gate": data})
    data = calibrator().model_dump(mode="json")
    data["features"][0] = "shoe_size"
    with pytest.raises(ConfigError, match="unknown features \\['shoe_size'\\]"):
        AnswerCalibrator.from_mapping(data)


def test_the_gate_must_not_read_the_critic_and_the_judge_must():
    with_critic = calibrator(("lp_mean", "p_supported"), (1.0, 1.0)).model_dump(mode="json")
    without = calibrator().model_dump(mode="json")
    with pytest.raises(ConfigError, match="gate: the gate calibrator must not read the critic's verdict"):
        SharpConfig.from_mapping({"gate": with_critic})
    with pytest.raises(ConfigError, match="judge: a judge calibrator reads the critic's verdict"):
        SharpConfig.from_mapping({"judge": without})
    assert SharpConfig.from_mapping({"gate": without, "judge": with_critic}).judge.needs_critic


def test_a_calibrator_of_another_corpus_or_ranker_is_refused_naming_both_datasets():
    cal = calibrator(dataset="hotpotqa", corpus_sha256="a" * 64, ranker="r1")
    cal.check_fits("a" * 64, "r1", "hotpotqa")  # the one it was fitted on
    cal.check_fits(None, "r1")  # an index without a corpus digest cannot be told apart
    with pytest.raises(
        CalibratorError,
        match="does not fit this index: it was fitted on dataset 'hotpotqa' \\(corpus aaaaaaaaaaaa\\), this index "
        "holds dataset '2wikimultihopqa' \\(corpus bbbbbbbbbbbb\\).*--target critic",
    ):
        cal.check_fits("b" * 64, "r1", "2wikimultihopqa")
    with pytest.raises(CalibratorError, match="fitted with ranker 'r1', this retriever uses None"):
        cal.check_fits("a" * 64, None, "hotpotqa")
