"""The critic's calibrator: features of a critique, its stored numbers and their checks."""

from __future__ import annotations

import pytest

from optimize.calibrate import fit_calibrator, pick_threshold, report
from program.calibration import FEATURES, Calibrator, CalibratorError, critique_features, question_names
from program.errors import ConfigError
from program.sharp import SharpConfig
from program.types import Passage


def cases(n=40):
    """Complete evidence has two strong passages; incomplete one (the token P is noise around 0.4)."""
    out = []
    for i in range(n):
        complete = i % 2 == 0
        scores = [0.9, 0.8 if complete else 0.2, 0.1]
        evidence = [Passage(f"p{i}{j}", f"T{j}", "text", s) for j, s in enumerate(scores)]
        crit = {"p_sufficient": 0.4 + (0.01 * (i % 5)), "verdict": "insufficient"}
        out.append({"features": critique_features(crit, evidence, "Who directed Pulp Fiction?", 0), "label": complete})
    return out


def test_features_read_the_critique_and_the_retrievers_scores():
    evidence = [Passage("a", "Pulp Fiction", "a film", 0.9), Passage("b", "Quentin Tarantino", "a director", 0.7)]
    f = critique_features(
        {"p_sufficient": 0.3, "verdict": "sufficient"},
        evidence,
        "Who directed Pulp Fiction?",
        1,
        {"a": "q1", "b": "q2"},
    )
    assert set(f) == set(FEATURES)
    assert f["p_token"] == 0.3 and f["said_sufficient"] == 1.0 and f["score_1"] == 0.9 and f["score_3"] == 0.0
    assert f["margin_23"] == pytest.approx(0.7) and f["titles"] == 2 and f["queries"] == 2 and f["round"] == 1
    assert f["question_covered"] == 1.0 and question_names("Who directed Pulp Fiction?") == ["Pulp Fiction"]


def test_a_fitted_calibrator_separates_what_the_token_probability_cannot():
    train, held = cases(40), cases(20)
    cal = fit_calibrator(train, fitted_on={"dataset": "toy"})
    probs = [cal.probability(c["features"]) for c in held]
    labels = [c["label"] for c in held]
    assert report(probs, labels, 0.5)["auroc"] == 1.0
    assert report([c["features"]["p_token"] for c in held], labels, 0.5)["auroc"] < 0.7
    t = pick_threshold(probs, labels, max_over_trigger=0.15)
    r = report(probs, labels, t)
    assert r["over_trigger"] <= 0.15 and r["under_trigger"] == 0.0


def test_the_calibrator_is_plain_numbers_in_the_config_and_survives_a_round_trip():
    cal = fit_calibrator(cases(), fitted_on={"dataset": "toy"})
    cfg = SharpConfig(calibrator=cal)
    again = SharpConfig.from_mapping(cfg.model_dump(mode="json"))
    f = cases(2)[0]["features"]
    assert again.calibrator.probability(f) == pytest.approx(cal.probability(f))


def test_an_edited_calibrator_is_refused_naming_how_to_refit():
    data = fit_calibrator(cases()).model_dump(mode="json")
    data["weights"][0] += 1.0
    with pytest.raises(ConfigError, match="do not match its digest.*sharp compile --target critic"):
        SharpConfig.from_mapping({"calibrator": data})
    data = fit_calibrator(cases()).model_dump(mode="json")
    data["features"][0] = "shoe_size"
    with pytest.raises(ConfigError, match="unknown features"):
        Calibrator.from_mapping(data)


def test_a_calibrator_of_another_corpus_or_reranker_is_refused():
    cal = fit_calibrator(cases(), fitted_on={"dataset": "hotpotqa", "corpus_sha256": "a" * 64, "reranker": "hp"})
    cal.check_fits("a" * 64, "hp")  # the one it was fitted on
    with pytest.raises(CalibratorError, match="another|fitted on corpus aaaaaaaaaaaa.*this index holds corpus bbbb"):
        cal.check_fits("b" * 64, "hp")
    with pytest.raises(CalibratorError, match="fitted with reranker 'hp', this retriever uses None"):
        cal.check_fits("a" * 64, None)


def test_one_label_only_cannot_be_fitted():
    with pytest.raises(ConfigError, match="all have the label"):
        fit_calibrator([c for c in cases() if c["label"]])


def test_feature_selection_keeps_what_cross_validation_says_separates():
    from optimize.calibrate import cv_auroc, select_features

    data = cases(40)
    groups = [i // 2 for i in range(40)]  # two critiques per question, kept in one fold
    features, c, table = select_features(data, groups)
    assert "score_2" in features  # the score separates here, the token probability is noise
    assert len(table) == 10 and all(row["cv_auroc"] is not None for row in table)
    best = max(row["cv_auroc"] for row in table)
    assert cv_auroc(data, groups, features, c) == best == 1.0
    assert cv_auroc(data, groups, ("p_token",), 1.0) < 0.7


def test_feature_selection_prefers_the_token_probability_alone_when_nothing_adds():
    from optimize.calibrate import select_features

    data = []
    for i in range(40):  # the token probability separates; the scores are constant
        complete = i % 2 == 0
        evidence = [Passage(f"p{i}{j}", f"T{j}", "text", 0.5) for j in range(3)]
        crit = {"p_sufficient": 0.45 if complete else 0.30, "verdict": "insufficient"}
        data.append({"features": critique_features(crit, evidence, "Who?", 0), "label": complete})
    features, c, _ = select_features(data, list(range(40)))
    assert features == ("p_token",) and c == 0.1  # ties: the fewest features, then the stronger regularisation
