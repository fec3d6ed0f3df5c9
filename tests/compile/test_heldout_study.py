"""The held-out study of a compiled answer critic (experiments/lab/studies/heldout_critic.py) and the
read-only access to a recording it uses: what it reports is what replay and the critic's report give on the
same drafts, and a recording that lacks a question is refused by name, never recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.jobs.compile_job import CompileJob
from experiments.lab.studies import heldout_critic
from optimize import recording, replay
from optimize.gate_fitting import round_cases
from program.sharp.rounds import titles_only
from tests.compile.test_critic import compile_critic, splits


@pytest.fixture(scope="module")
def compiled(module_world, tmp_path_factory, mlflow_store):
    """The toy critic compiled once for the module's tests, which read it (the program, its recording, the
    held-out questions) and never change it; its run in an experiment of the module's own."""
    import mlflow

    from experiments import tracking

    tracking.configure(mlflow_store.uri, mlflow_store.ws, "test_heldout_study")
    out, _, _ = compile_critic(
        module_world, tmp_path_factory.mktemp("compiled"), CompileJob(target="critic", name="toy-critic")
    )
    while mlflow.active_run() is not None:  # (as the tracked fixture leaves it)
        mlflow.end_run()
    _, held = splits(module_world)
    path = Path(out.critic["recording"])
    return out.module, path, held


def test_the_critic_report_covers_every_recorded_draft_of_the_questions(compiled):
    program, path, held = compiled
    records = recording.read_records(path, held)
    rep = heldout_critic.critic_report(program, records, held)
    cases = round_cases(records, held, program.config)
    assert rep["all"]["drafts"] == len(cases) and rep["all"]["questions"] == len(held)
    assert rep["first_drafts"]["drafts"] == len(held)  # one draft per question
    assert rep["all"]["threshold"] == program.config.accept_threshold
    assert 0.0 <= rep["all"]["brier"] <= 1.0


def test_the_policy_report_is_the_replay_of_the_draft_alone_and_of_the_program(compiled):
    program, path, held = compiled
    records = recording.read_records(path, held)
    rep = heldout_critic.policy_report(program, records, held)
    draft = replay.score(records, held, program.config.replace(max_repairs=0, ask_critic="off", yes_threshold=None,
                                                               option_form="question", force_option=False,
                                                               span_rule="off"))  # fmt: skip
    full = replay.score(records, held, program.config)
    assert rep["all"]["questions"] == len(held)
    assert rep["all"]["em draft only"] == round(draft.metrics["em"], 3)
    assert rep["all"]["em program"] == round(full.metrics["em"], 3)
    assert rep["lm_calls_per_q"]["draft only"] == 1.0
    assert rep["lm_calls_per_q"]["program"] == round(full.metrics["lm_calls_per_q"], 2)
    forms = {records[ex.id]["form"] for ex in held}
    assert sum(rep[f]["questions"] for f in forms) == len(held)


def test_read_records_refuses_a_recording_that_lacks_questions_and_records_nothing(compiled, tmp_path):
    _, path, held = compiled
    partial = tmp_path / "partial.jsonl"
    lines = [line for line in path.read_text().splitlines() if json.loads(line)["id"] != held[0].id]
    partial.write_text("\n".join(lines) + "\n")
    before = partial.read_text()
    with pytest.raises(replay.ReplayError, match=rf"lacks 1 of the {len(held)} questions.*{held[0].id}"):
        recording.read_records(partial, held)
    assert partial.read_text() == before
    with pytest.raises(replay.ReplayError, match="no recording at"):
        recording.read_records(tmp_path / "none.jsonl", held)


def test_the_pooled_study_prefixes_ids_and_judges_each_round_at_its_own_programs_threshold(compiled):
    from experiments.lab.studies import pooled_critic

    program, path, held = compiled
    records = recording.read_records(path, held)
    mine = pooled_critic.judged(program, records, held, titles_only, "toy")
    assert {c["question_id"].split(":", 1)[0] for c in mine} == {"toy"}
    assert all(c["threshold"] == program.config.accept_for(c["form"]) for c in mine)
    # a second "corpus" with a gate that accepts nothing: its rounds are all sent to a repair
    strict = [dict(c, question_id="other:" + c["question_id"], part="other", threshold=1.01) for c in mine]
    out = pooled_critic.summarize(mine + strict, seed=0)
    assert out["all"]["drafts"] == 2 * len(mine)
    assert out["all"]["questions"] == 2 * len(held)  # same ids, two corpora: never merged
    assert out["all"]["threshold"] == "each case's own"
    assert out["part other"]["over_trigger"] == 1.0 and out["part other"]["under_trigger"] == 0.0


def test_one_gate_refitted_on_the_parts_tuning_rounds_is_reported_on_the_held_out_rounds(compiled):
    from experiments.lab.studies import pooled_critic
    from optimize.gate_fitting import fit_answer_critic, report

    program, path, held = compiled
    records = recording.read_records(path, held)
    half = len(held) // 2
    tune = pooled_critic.judged(program, records, held[:half], titles_only, "toy")
    check = pooled_critic.judged(program, records, held[half:], titles_only, "toy")
    out = pooled_critic.refit(tune, check, seed=0)
    gate = fit_answer_critic(tune, [], {"parts": ["toy"]})["gate"]
    expected = report([gate.probability(c["features"]) for c in check], check, [c["threshold"] for c in check])
    assert out["fitted on"] == {"drafts": len(tune), "questions": len({c["question_id"] for c in tune})}
    assert out["all"]["drafts"] == len(check) and out["all"]["auroc"] is not None
    assert out["all"]["auroc"] == expected["auroc"] and out["all"]["brier"] == expected["brier"]
    assert out["features"] == list(gate.features)


def test_report_refuses_a_threshold_list_of_the_wrong_length():
    from optimize.gate_fitting import report

    cases = [{"label": True, "question_id": "a"}, {"label": False, "question_id": "b"}]
    assert report([0.9, 0.1], cases, [0.5, 0.5])["under_trigger"] == 0.0
    with pytest.raises(ValueError, match="1 thresholds for 2 cases"):
        report([0.9, 0.1], cases, [0.5])


@pytest.mark.parametrize(
    ("text", "match"),
    [("hotpotqa,1,2,p.json", "5 fields"), ("hotpotqa,x,2,p.json,r.jsonl", "integers"),
     ("hotpotqa,0,0,p.json,r.jsonl", "N > 0")],
)  # fmt: skip
def test_a_malformed_part_is_refused_by_name(text, match):
    import argparse

    from experiments.lab.studies import pooled_critic

    with pytest.raises(argparse.ArgumentTypeError, match=match):
        pooled_critic.parse_part(text)


# ---- levers kept by their tuning CI (optimize/levers.py, experiments/lab/studies/lever_selection.py) -------
def _effect(name, setting, delta, overrides=None):
    from optimize.levers import Effect, Lever

    return Effect(Lever(name, setting, overrides or {setting: name}), delta, 1.0, 1.0, 0.5)


def test_a_lever_is_kept_only_where_its_tuning_ci_lies_above_zero_and_one_per_setting():
    from optimize.levers import select

    effects = [
        _effect("span a", "span_rule", [0.02, 0.001, 0.04]),
        _effect("span b", "span_rule", [0.03, 0.002, 0.05]),  # the same setting, adds more: kept instead
        _effect("compare", "repair_comparison", [0.016, 0.0, 0.031]),  # the CI touches zero: not kept
        _effect("yes", "yes_threshold", [-0.01, -0.03, 0.01]),
        _effect("none", "force_option", None),  # too few questions to say
    ]
    assert [lever.name for lever in select(effects)] == ["span b"]


def test_the_kept_levers_make_the_neutral_program_with_their_settings():
    from optimize.levers import NEUTRAL, Lever, combine
    from program.sharp.policy import SharpConfig

    tuned = SharpConfig(yes_threshold=0.9, span_rule="both", repair_bridge=("focus",), accept_threshold=0.3)
    kept = [Lever("spans", "span_rule", {"span_rule": "span"}),
            Lever("yes/no", "repair_yesno", {"repair_yesno": ("compare",), "compare_by": "code"}, "compare")]  # fmt: skip
    cfg = combine(tuned, kept)
    assert cfg.span_rule == "span" and cfg.repair_yesno == ("compare",) and cfg.compare_by == "code"
    assert cfg.yes_threshold is None and cfg.repair_bridge == () and cfg.accept_threshold == NEUTRAL["accept_threshold"]


def test_each_lever_is_measured_by_replay_against_the_neutral_program(compiled):
    from optimize.levers import NEUTRAL, Lever, measure

    program, path, held = compiled
    records = recording.read_records(path, held)
    lever = Lever("yes/no checked per entity", "repair_yesno", {"repair_yesno": ("compare",)}, "compare")
    neutral, [effect] = measure(records, held, program.config, [lever])
    plain = replay.score(records, held, program.config.replace(**NEUTRAL))
    with_it = replay.score(records, held, program.config.replace(**{**NEUTRAL, "repair_yesno": ("compare",)}))
    assert neutral["em"] == round(plain.metrics["em"], 4) and neutral["lm_calls_per_q"] == round(
        plain.metrics["lm_calls_per_q"], 3
    )
    assert effect.em == round(with_it.metrics["em"], 4)
    assert effect.delta_em[0] == round(with_it.metrics["em"] - plain.metrics["em"], 4)
    assert effect.per_question == {r["id"]: float(r["em"]) for r in with_it.rows}


def test_the_lever_study_reports_tuning_and_held_out_and_only_levers_the_recording_can_replay(compiled):
    from experiments.lab.studies.lever_selection import study

    program, path, held = compiled
    records = recording.read_records(path, held)
    half = len(held) // 2
    out = study(program, records, held[:half], held[half:], titles_only)
    have = set(out["recorded actions"])
    assert "retrieve" in have or not any("re-retrieval" in k for k in out["tuning"]["levers alone"])
    assert out["tuning"]["questions"] == half and out["held out"]["questions"] == len(held) - half
    assert set(out["tuning"]["levers alone"]) == set(out["held out"]["levers alone"])
    assert out["kept config"]["ask_critic"] == "off"
    forms = {records[ex.id]["form"] for ex in held[:half]}
    assert all(set(row["em by form"]) == forms for row in out["tuning"]["levers alone"].values())


# ---- cross-fitted lever selection (optimize/levers.py crossfit, experiments/lab/studies/crossfit_levers.py) --
def test_a_threshold_grid_offers_each_yes_no_rule_once_per_threshold_and_refuses_a_threshold_out_of_range():
    from optimize.levers import levers
    from program.sharp.policy import SharpConfig

    tuned = SharpConfig(yes_threshold=0.93)
    assert [lv.overrides["yes_threshold"] for lv in levers(tuned) if lv.setting == "yes_threshold"] == [0.93]
    grid = levers(tuned, (0.6, 0.8))
    assert [lv.overrides["yes_threshold"] for lv in grid if lv.setting == "yes_threshold"] == [0.6, 0.8]
    subs = [lv.overrides.get("yes_threshold_sub") for lv in grid if lv.setting == "repair_yesno"]
    assert subs == [None, 0.6, 0.8]  # combined in code, then each check from P(yes) at each threshold
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        levers(tuned, (0.5, 1.0))
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        levers(tuned, ())


def test_the_cross_fit_scores_every_question_once_by_the_levers_chosen_without_its_fold(compiled):
    from optimize.levers import NEUTRAL, combine, crossfit, levers, measure, scores, select

    program, path, held = compiled
    records = recording.read_records(path, held)
    base = program.config
    candidates = levers(base)
    cf = crossfit(records, held, base, candidates, k=3)
    assert sorted(cf.em) == sorted(cf.em0) == sorted(ex.id for ex in held)
    assert [f["questions"] for f in cf.folds] == [len(held[i::3]) for i in range(3)]
    assert cf.em0 == scores(records, held, base.replace(**NEUTRAL), titles_only, 0)[0]
    for i, fold in enumerate(cf.folds):  # each fold's choice is the one made on the other two alone
        rest = [ex for j in range(3) if j != i for ex in held[j::3]]
        kept = select(measure(records, rest, base, candidates)[1])
        assert fold["kept"] == [lever.name for lever in kept]
        got = scores(records, held[i::3], combine(base, kept), titles_only, 0)[0]
        assert {q: cf.em[q] for q in got} == got
    with pytest.raises(ValueError, match="2 <= folds <= questions"):
        crossfit(records, held, base, candidates, k=1)
    with pytest.raises(ValueError, match="2 <= folds <= questions"):
        crossfit(records, held, base, candidates, k=len(held) + 1)


def test_the_cross_fit_study_reports_the_paired_gain_by_form_and_the_levers_kept_on_all(compiled):
    from experiments.lab.studies.crossfit_levers import study
    from optimize.levers import NEUTRAL

    program, path, held = compiled
    records = recording.read_records(path, held)
    out = study(program, records, held, 2, titles_only)
    cf = out["cross-fitted"]
    assert cf["questions"] == len(held) and len(cf["folds"]) == 2
    low, high = cf["delta_em"][1], cf["delta_em"][2]
    assert low <= cf["delta_em"][0] <= high
    gain = cf["em levers chosen out of fold"] - cf["em neutral (the ranked read as written)"]
    assert gain == pytest.approx(cf["delta_em"][0], abs=2e-4)  # the paired difference is the means' difference
    forms = {records[ex.id]["form"] for ex in held}
    assert set(cf["by form"]) == forms
    assert sum(row["questions"] for row in cf["by form"].values()) == len(held)
    assert set(out["kept config"]) >= set(NEUTRAL)
    assert any("P(yes) >= 0.6" in name for name in out["candidates"])  # the grid, not the tuned values


# ---- how far a threshold on the reader's P(yes) can go (experiments/lab/studies/yesno_ceiling.py) ----------
def test_the_yes_no_ceiling_is_the_best_threshold_in_sample_and_the_fold_threshold_never_sees_its_fold():
    from experiments.lab.studies.yesno_ceiling import ceiling

    rows = [{"id": "a", "gold": "yes", "text": "yes", "p_yes": 0.9}, {"id": "b", "gold": "yes", "text": "yes", "p_yes": 0.8},
            {"id": "c", "gold": "no", "text": "yes", "p_yes": 0.7}, {"id": "d", "gold": "no", "text": "yes", "p_yes": 0.6}]  # fmt: skip
    out = ceiling(rows, folds=2)
    assert out["accuracy, the text as written"] == 0.5 and out["reader says yes"] == 1.0
    assert out["AUROC of P(yes) for gold yes"] == 1.0
    assert out["accuracy, the best threshold on these questions (ceiling)"] == 1.0 and out["that threshold"] == 0.8
    # fold a,c chooses on b,d (0.8: right on both); fold b,d chooses on a,c (0.9), which turns b's "yes" to "no"
    assert out["thresholds chosen"] == [0.8, 0.9] and out["accuracy, a threshold chosen in 2 folds"] == 0.75
    # a draft without P(yes) keeps its text whatever the threshold
    more = [*rows, {"id": "e", "gold": "no", "text": "no", "p_yes": None}]
    assert ceiling(more, folds=2)["accuracy, the best threshold on these questions (ceiling)"] == 1.0
    with pytest.raises(ValueError, match="cannot be split into 5 folds"):
        ceiling(rows, folds=5)


def test_the_chain_levers_need_recorded_chains_and_say_how_they_answer():
    from optimize.levers import BEAM_ROUTES, CHAIN_ROUTES, combine, levers, shown
    from program.sharp.policy import SharpConfig

    chain = [lever for lever in levers(SharpConfig()) if lever.needs == "chain"]
    assert [lever.setting for lever in chain] == ["repair_bridge"] * (2 + len(CHAIN_ROUTES) + len(BEAM_ROUTES))
    routed = chain[2 + len(CHAIN_ROUTES) - 1].overrides
    assert routed["repair_bridge"] == ("chain",) and routed["accept_threshold"] == CHAIN_ROUTES[-1]
    assert chain[-1].overrides["chain_beam"] == BEAM_ROUTES[-1] and chain[-1].overrides["chain_answer"] == "hop"
    kept = combine(SharpConfig(), [chain[1]])
    assert kept.chain_answer == "union" and shown("chain_answer", kept) and not shown("chain_answer", SharpConfig())


def test_a_lever_whose_rounds_are_recorded_for_some_questions_only_is_no_candidate(compiled):
    """A recording that holds a repair for some questions only (MuSiQue's: re-retrieval for its one comparison,
    none for its bridges) offers no lever that reaches it elsewhere: the studies name it instead of stopping."""
    import copy

    from experiments.lab.studies.crossfit_levers import study
    from optimize.levers import levers, replayable

    program, path, held = compiled
    records = copy.deepcopy(recording.read_records(path, held))
    bridges = [ex.id for ex in held if records[ex.id]["form"] == "bridge"]
    assert len(bridges) >= 2
    for qid in bridges[1:]:  # only the first bridge keeps its re-retrieval rounds
        records[qid]["rounds"] = [r for r in records[qid]["rounds"] if r["action"] != "retrieve"]
    assert any(r["action"] == "retrieve" for r in records[bridges[0]]["rounds"])
    kept, refused = replayable(records, held, program.config, levers(program.config))
    assert "bridges: re-retrieval" in refused and "did not record" in refused["bridges: re-retrieval"]
    assert "bridges: re-retrieval" not in [lever.name for lever in kept] and kept
    out = study(program, records, held, 2, titles_only)
    assert "bridges: re-retrieval" in out["not candidates (rounds the recording lacks)"]
    assert "bridges: re-retrieval" not in out["candidates"]


def test_the_chain_lever_study_measures_each_chain_lever_on_bridges_and_names_those_it_cannot_replay(compiled):
    from experiments.lab.studies.chain_levers import study
    from optimize.levers import levers

    program, path, held = compiled
    records = recording.read_records(path, held)
    out = study(program, records, held, titles_only)
    assert out["bridges"] == sum(records[ex.id]["form"] == "bridge" for ex in held) > 0
    chained = any(r["action"] == "chain" for ex in held for r in records[ex.id]["rounds"])
    named = set(out["levers"]) | set(out.get("not replayable (rounds the recording lacks)", {}))
    assert named == {lever.name for lever in levers(program.config) if lever.needs == "chain"}  # each one, once
    assert bool(out["levers"]) == chained  # measured where the recording holds chains, else named
    assert sum(out["chains"].values()) == sum(
        r["action"] == "chain" for ex in held if records[ex.id]["form"] == "bridge" for r in records[ex.id]["rounds"]
    )


def test_the_chain_lever_study_sets_each_chain_beside_its_branch_by_gold():
    """Where the recording holds the beam's branches: each chain's last answer and its branch's, right, wrong or
    stopped by gold; the most a perfect choice adds is the branches right where the chain is not."""
    from types import SimpleNamespace

    from experiments.lab.studies.chain_levers import branch_outcomes

    plan = {"hops": ["Who directed X?", "Where was #1 born?"]}

    def chain(answers, fallback=None, branch=None):
        return {"action": "chain", "plan": plan, "hop_answers": answers, "fallback": fallback, "branch": branch}

    rounds = {
        "a": [chain(["D", "Rome"], branch=chain(["E", "Paris"]))],  # right, wrong
        "b": [chain(["E", "Paris"], branch=chain(["D", "Rome"]))],  # wrong, right: mended
        "c": [chain(["D"], fallback="hop 2: no answer", branch=chain(["E", "Rome"]))],  # stopped, right: mended
        "d": [chain(["D", "Rome"])],  # no branch: not counted
        "e": [{"action": "focus"}],
    }
    records = {k: {"form": "bridge", "rounds": v} for k, v in rounds.items()}
    bridges = [SimpleNamespace(id=k, answer="Rome", answers=None) for k in rounds]
    out = branch_outcomes(records, bridges)
    assert out["chains with a branch"] == 3
    assert out["pairs"] == {
        "chain right, branch wrong": 1,
        "chain stopped, branch right": 1,
        "chain wrong, branch right": 1,
    }
    assert out["the branch right where the chain is not (a perfect choice's gain)"] == 2
    assert branch_outcomes({"d": records["d"]}, bridges[3:4]) == {}
