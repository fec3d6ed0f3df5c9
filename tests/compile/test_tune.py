"""Tuning SHARP's policy: the search space, study resume in sqlite, trials scored by replay of one recording,
MLflow parent and nested runs, the best program saved."""

from __future__ import annotations

import warnings
from pathlib import Path

import mlflow
import optuna
import pytest

from experiments.jobs.tune_job import TuneJob, load_space, run_tune
from optimize.policy_search import (
    BRIDGE_ORDERS,
    REPAIR_ORDERS,
    YES_GRID,
    CallCost,
    ReplayScorer,
    SearchSpace,
    TrialSeededSampler,
    Tuner,
    apply_params,
    enqueue_baseline,
    enqueue_every_repair,
    finished_trials,
    float_ranges,
    get_objective,
    in_space,
    open_study,
    params_of,
    run_study,
    suggest,
)
from program.errors import ConfigError
from program.serving.saved import read_program
from program.sharp.policy import TUNED_FIELDS, SharpConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

TOY_SPACE = SearchSpace(threshold_low=0.3, threshold_high=0.95, floor_high=0.5)


# ---- the space -----------------------------------------------------------------------------------------
def test_space_validation_names_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="fixed: unknown parameter\\(s\\) \\['confidence_threshold'\\]"):
        SearchSpace.from_mapping({"fixed": {"confidence_threshold": 0.5}})
    with pytest.raises(ConfigError, match="repair_comparison: unknown repair order\\(s\\) \\['bridge,retrieve'\\]"):
        SearchSpace.from_mapping({"repair_comparison": ["bridge,retrieve"]})
    with pytest.raises(ConfigError, match="must not exceed"):
        SearchSpace.from_mapping({"threshold_low": 0.9, "threshold_high": 0.5})
    with pytest.raises(ConfigError, match=r"max_repairs: unknown choice\(s\) \[3\]"):
        SearchSpace.from_mapping({"max_repairs": [1, 3]})
    with pytest.raises(ConfigError, match="choose needs at least one choice"):
        SearchSpace.from_mapping({"choose": []})
    with pytest.raises(ConfigError, match="unknown key 'k_start'"):
        SearchSpace.from_mapping({"k_start": [1, 2]})  # retrieval settings are no policy: they need a recording
    with pytest.raises(ConfigError, match="unknown objective"):
        get_objective("bleu")
    path = tmp_path / "space.yaml"
    path.write_text("threshold_low: 0.5\nrepair_bridge: [retrieve]\nfixed: {choose: last}\n")
    space = load_space(path, {"ask_critic": "off"})
    assert space.threshold_low == 0.5 and space.repair_bridge == ("retrieve",)
    assert space.fixed == {"choose": "last", "ask_critic": "off"}


def test_whether_a_space_needs_a_critiqued_recording():
    assert SearchSpace().needs_critic
    assert not SearchSpace(ask_critic=("off",)).needs_critic
    assert not SearchSpace(fixed={"ask_critic": "off"}).needs_critic
    assert SearchSpace(ask_critic=("off",), fixed={"ask_critic": "band"}).needs_critic  # the pin wins


def test_suggest_stays_within_the_space_and_keeps_the_pins():
    space = SearchSpace(
        threshold_low=0.4, threshold_high=0.6, ask_critic=("band",), max_repairs=(1,), fixed={"choose": "last"}
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(20):
        params = suggest(study.ask(), space)
        assert set(params) == set(TUNED_FIELDS) - {"chain_beam"}  # a lever added later, offered at its default
        assert all(0.4 <= params[k] <= 0.6 for k in ("accept_threshold", "accept_comparison", "accept_yesno"))
        assert 0.0 <= params["critic_floor"] <= 0.9
        assert params["ask_critic"] == "band" and params["max_repairs"] == 1 and params["choose"] == "last"
        assert params["repair_comparison"] in REPAIR_ORDERS and params["repair_bridge"] in BRIDGE_ORDERS
        assert params["yes_threshold"] in YES_GRID and params["span_rule"] in ("off", "name", "span", "both")
        assert in_space(params, space)
        apply_params(SharpConfig(), params)  # every point is a valid config


def test_a_lever_added_later_is_suggested_only_where_the_space_offers_more_than_its_default():
    """chain_beam came after programs were shipped: a space without it draws, saves and rebuilds what it did
    before (the MANIFEST rebuild test holds it to the byte); a space that offers it searches it; the base
    program's own value stands where it is not searched (a build's --set chain_beam is kept)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    assert "chain_beam" not in suggest(study.ask(), SearchSpace())
    space = SearchSpace(chain_answer=("hop",), chain_beam=("off", 0.5, 1.0))
    seen = {suggest(study.ask(), space)["chain_beam"] for _ in range(30)}
    assert seen == {"off", 0.5, 1.0}
    assert apply_params(SharpConfig(chain_beam=0.7), suggest(study.ask(), SearchSpace())).chain_beam == 0.7
    assert apply_params(SharpConfig(chain_beam=0.7), {"chain_beam": "off"}).chain_beam is None


SPACES = {
    "default": SearchSpace(),
    "toy": TOY_SPACE,
    **{p.stem: p for p in sorted(Path(__file__).resolve().parents[2].glob("experiments/spaces/*.yaml"))},
}


@pytest.mark.parametrize("name", SPACES)
def test_a_study_suggests_each_parameter_from_one_range(name):
    """Optuna keeps the first range a name is suggested with and only warns of a second: here that warning is
    an error, and every trial of the study (the queued baseline and corner too) holds one distribution a name."""
    space = SPACES[name] if isinstance(SPACES[name], SearchSpace) else load_space(SPACES[name])
    objective = get_objective("f1")
    study = optuna.create_study(direction="maximize", sampler=TrialSeededSampler(seed=1))
    enqueue_baseline(study, space, params_of(SharpConfig()))
    enqueue_every_repair(study, space)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_study(study, Tuner(space, objective, lambda p: ({"f1": p["accept_threshold"]}, False)), 6)
    seen: dict = {}
    for trial in study.trials:
        for param, distribution in trial.distributions.items():
            assert seen.setdefault(param, distribution) == distribution, f"{param} suggested from two ranges"
    for param, (low, high) in float_ranges(space).items():
        if param not in space.fixed:
            assert (seen[param].low, seen[param].high) == (low, high)


def test_a_pinned_off_read_by_yaml_as_false_turns_the_rule_off_and_never_becomes_a_zero_threshold():
    from experiments.keyvalue import parse_sets

    fixed = parse_sets(["yes_threshold=off", "yes_threshold_sub=off", "span_rule=off", "ask_critic=off"], "--fix")
    assert fixed["yes_threshold"] is False  # what YAML makes of a bare off: the case this guards
    space = SearchSpace(fixed=fixed)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    cfg = apply_params(SharpConfig(), suggest(study.ask(), space))
    assert cfg.yes_threshold is None and cfg.yes_threshold_sub is None  # off, not P(yes) >= 0.0 ("yes" always)
    assert cfg.span_rule == "off" and cfg.ask_critic == "off"


@pytest.mark.parametrize("value", [False, True])
def test_a_config_refuses_a_boolean_yes_threshold(value):
    with pytest.raises(ConfigError, match="yes_threshold.*not " + str(value)):
        SharpConfig.from_mapping({"yes_threshold": value})


def test_params_and_configs_round_trip():
    default = params_of(SharpConfig())
    assert default == {
        "accept_threshold": 0.8,
        "accept_comparison": 0.8,  # a form without its own threshold: the general one
        "accept_yesno": 0.8,
        "ask_critic": "off",
        "critic_floor": 0.0,
        "max_repairs": 2,
        "repair_bridge": "retrieve",
        "repair_comparison": "compare,retrieve",
        "repair_yesno": "compare,retrieve",
        "focus_when": "flagged",
        "choose": "confidence",
        "yes_threshold": "off",  # the reader's text, not its P(yes)
        "yes_threshold_sub": "off",
        "compare_by": "code",
        "option_form": "question",
        "force_option": False,
        "span_rule": "off",
        "place_rule": "off",
        "chain_answer": "hop",
        "chain_beam": "off",
    }
    back = apply_params(SharpConfig(), default)
    same = {k: v for k, v in back.model_dump().items() if k not in ("accept_comparison", "accept_yesno")}
    assert params_of(back) == default and same.items() <= SharpConfig().model_dump().items()
    assert apply_params(SharpConfig(), {"accept_yesno": 0.4}).accept_for("yesno") == 0.4
    cfg = apply_params(SharpConfig(k_schedule=(2, 4)), {"repair_bridge": "none", "repair_yesno": "retrieve"})
    assert cfg.repair_bridge == () and cfg.repair_yesno == ("retrieve",) and cfg.k_schedule == (2, 4)
    assert params_of(cfg)["repair_bridge"] == "none"
    with pytest.raises(ConfigError, match="unknown policy parameter 'k_schedule'"):
        apply_params(SharpConfig(), {"k_schedule": (1, 2)})
    assert in_space(default, SearchSpace()) and not in_space(default, SearchSpace(threshold_high=0.5))
    pinned = dict.fromkeys(("accept_threshold", "accept_comparison", "accept_yesno"), 0.8)
    assert in_space(default, SearchSpace(threshold_high=0.5, fixed=pinned))
    assert not in_space({**default, "repair_bridge": "compare"}, SearchSpace())
    assert apply_params(SharpConfig(), {"yes_threshold": 0.9}).yes_threshold == 0.9
    assert apply_params(SharpConfig(), {"yes_threshold": "off"}).yes_threshold is None


def test_em_cost_charges_every_call_beyond_one_and_a_penalty_over_the_cap():
    cost = CallCost()
    assert (cost.weight, cost.max_calls) == (0.02, 2.0)  # the defaults `sharp tune --help` states
    assert cost.em_cost({"em": 0.5, "lm_calls_per_q": 1.0}) == 0.5
    assert cost.em_cost({"em": 0.5, "lm_calls_per_q": 2.0}) == pytest.approx(0.48)
    assert cost.em_cost({"em": 0.5, "lm_calls_per_q": 3.0}) == pytest.approx(0.5 - 0.04 - 1.0)
    assert CallCost(max_calls=None).em_cost({"em": 0.5, "lm_calls_per_q": 3.0}) == pytest.approx(0.46)
    assert cost.em_cost({"em": None, "lm_calls_per_q": None}) == 0.0
    # the objective derives it, with the call cost it is given
    metrics = {"em": 0.5, "lm_calls_per_q": 2.0}
    assert get_objective("em-cost").scored(metrics)["em_cost"] == pytest.approx(0.48)
    assert get_objective("em-cost", CallCost(weight=0.1)).scored(metrics)["em_cost"] == pytest.approx(0.4)
    assert get_objective("em-cost", CallCost(max_calls=1.5)).scored(metrics)["em_cost"] == pytest.approx(-0.52)
    assert "em_cost" not in get_objective("f1").scored(metrics)


def test_a_form_below_its_floor_costs_the_policy_the_cap_s_penalty():
    cost = CallCost(max_calls=None, floors={"comparison": 0.8, "yesno": 0.5})
    kept = {"em": 0.6, "lm_calls_per_q": 1.0, "em.form.comparison": 0.8, "em.form.yesno": 0.6}
    assert cost.below_floor(kept) == [] and cost.em_cost(kept) == pytest.approx(0.6)
    lost = {**kept, "em": 0.7, "em.form.comparison": 0.75}  # more EM overall, bought with comparisons
    assert cost.below_floor(lost) == ["comparison"] and cost.em_cost(lost) == pytest.approx(0.7 - 1.0 - 0.05)
    nearer = {**lost, "em.form.comparison": 0.79}  # no policy keeps the floor: the nearest one scores best
    assert cost.em_cost(nearer) > cost.em_cost(lost)
    assert cost.em_cost({"em": 0.6, "lm_calls_per_q": 1.0}) == pytest.approx(0.6)  # no question of the form: no loss
    with pytest.raises(ValueError, match="a form's floor is an EM in"):
        CallCost(floors={"bridge": 1.5})


def test_the_replay_scorer_reports_each_form_s_em_by_the_form_recorded():
    from optimize.policy_search import form_em

    rows = [{"id": "a", "em": 1.0}, {"id": "b", "em": 0.0}, {"id": "c", "em": 1.0}, {"id": "d", "em": 1.0}]
    records = {"a": {"form": "bridge"}, "b": {"form": "bridge"}, "c": {"form": "yesno"}, "d": {"error": "x"}}
    assert form_em(rows, records) == {"em.form.bridge": 0.5, "em.form.yesno": 1.0}


@pytest.mark.parametrize("name", ["f1", "em", "f1-cost"])
def test_a_call_cost_is_refused_by_an_objective_that_prices_no_call(name):
    with pytest.raises(ConfigError, match=f"the {name} objective prices no LM call"):
        get_objective(name, CallCost(weight=0.1))
    with pytest.raises(ConfigError, match=f"the {name} objective prices no LM call"):
        TuneJob(objective=name, cost=CallCost(max_calls=3))
    with pytest.raises(ConfigError, match="max_calls"):
        CallCost.from_mapping({"max_calls": 0.5})  # every question spends one call on its draft


def test_a_study_is_resumed_only_with_the_call_cost_it_was_scored_with(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    objective = get_objective("em-cost", CallCost(weight=0.05))
    assert run_study(open_study(storage, "s", objective), Tuner(SearchSpace(), objective, fake_score), 2) == 2
    assert finished_trials(open_study(storage, "s", objective)) == 2  # the same cost resumes
    with pytest.raises(ConfigError, match="scored its trials with the call cost .*choose another --study"):
        open_study(storage, "s", get_objective("em-cost"))


# ---- studies -------------------------------------------------------------------------------------------
def fake_score(params):
    return {
        "f1": params["accept_threshold"] - 0.1 * params["max_repairs"],
        "em": 0.0,
        "lm_calls_per_q": 1.0 + params["max_repairs"],
    }, False


def test_study_resumes_in_sqlite_after_an_interruption(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    objective = get_objective("f1")
    assert run_study(open_study(storage, "s", objective), Tuner(SearchSpace(), objective, fake_score), 3) == 3

    calls = []

    def interrupted(params):
        calls.append(params)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_score(params)

    with pytest.raises(KeyboardInterrupt):
        run_study(open_study(storage, "s", objective), Tuner(SearchSpace(), objective, interrupted), 10)
    study = open_study(storage, "s", objective)  # a new process would do exactly this
    assert finished_trials(study) == 4
    assert [t.state.name for t in study.trials][-1] == "FAIL"
    assert run_study(study, Tuner(SearchSpace(), objective, fake_score), 10) == 6
    assert finished_trials(open_study(storage, "s", objective)) == 10
    assert run_study(study, Tuner(SearchSpace(), objective, fake_score), 10) == 0  # already done
    with pytest.raises(ConfigError, match="another --study"):
        open_study(storage, "s", get_objective("f1-cost"))


def test_the_starting_config_is_the_first_trial_when_it_lies_in_the_space():
    from optimize.policy_search import baseline_trial, enqueue_baseline

    default = params_of(SharpConfig())
    objective = get_objective("f1")
    study = optuna.create_study(direction="maximize")
    assert enqueue_baseline(study, SearchSpace(), default)
    seen = []
    run_study(study, Tuner(SearchSpace(), objective, lambda p: (seen.append(p), fake_score(p))[1]), 3)
    unsearched = {k: v for k, v in default.items() if k != "chain_beam"}  # offered at its default alone
    assert seen[0] == unsearched and seen[1] != unsearched
    assert baseline_trial(study).number == 0
    assert not enqueue_baseline(study, SearchSpace(), default)  # a study with trials is not re-seeded
    fresh = optuna.create_study(direction="maximize")
    assert not enqueue_baseline(fresh, SearchSpace(choose=("last",)), default) and not fresh.trials


def test_a_fresh_study_also_tries_the_corner_where_every_draft_is_repaired():
    from optimize.policy_search import enqueue_baseline, enqueue_every_repair

    space = SearchSpace(max_repairs=(0, 1), repair_bridge=("none", "focus"), fixed={"accept_yesno": 0.5})
    study = optuna.create_study(direction="maximize")
    default = params_of(SharpConfig(max_repairs=0, repair_bridge=("focus",)))
    assert enqueue_baseline(study, space, default) and enqueue_every_repair(study, space)
    assert not enqueue_every_repair(study, space)  # queued once
    seen = []
    run_study(study, Tuner(space, get_objective("f1"), lambda p: (seen.append(p), fake_score(p))[1]), 3)
    assert seen[0]["max_repairs"] == 0  # the starting config first
    corner = seen[1]
    assert corner["accept_threshold"] == corner["accept_comparison"] == 1.0 and corner["accept_yesno"] == 0.5
    assert (corner["max_repairs"], corner["repair_bridge"], corner["repair_comparison"]) == (1, "focus", "compare")
    assert not enqueue_every_repair(study, space)  # a study that has run trials is not re-seeded


def test_a_tie_on_the_objective_goes_to_the_policy_with_fewer_lm_calls():
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from optimize.policy_search import best_trial

    study = optuna.create_study(direction="maximize")
    dist = {"accept_threshold": FloatDistribution(0.0, 1.0)}
    for value, calls, thr in [(0.41, 3.08, 0.35), (0.30, 1.0, 0.9), (0.41, 2.0, 0.6), (0.41, 2.0, 0.7)]:
        study.add_trial(
            create_trial(
                value=value,
                params={"accept_threshold": thr},
                distributions=dist,
                user_attrs={"metrics": {"f1": value, "lm_calls_per_q": calls}},
            )
        )
    assert study.best_trial.number == 0  # Optuna alone keeps the first of the tied trials
    best = best_trial(study, get_objective("f1"))
    assert best.number == 2 and best.params["accept_threshold"] == 0.6  # equal F1, fewer calls; the earlier


# ---- run_tune over the toy world ------------------------------------------------------------------------
def nested_runs(parent_id):
    exp = mlflow.get_run(parent_id).info.experiment_id
    return mlflow.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", output_format="list")


def artifact_paths(run_id, path=""):
    client = mlflow.tracking.MlflowClient()
    out = []
    for a in client.list_artifacts(run_id, path):
        out += artifact_paths(run_id, a.path) if a.is_dir else [a.path]
    return out


def test_tune_scores_every_trial_by_replay_of_one_recording_and_saves_the_best_program(world, tmp_path, tracked):
    lms = world.lms()
    base = world.program()
    world.assign(base, lms)
    job = TuneJob(n_trials=8, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE, verify=True)
    out = run_tune(job, base, world.examples(), workspace=tmp_path, study_name="toy")
    assert out.trials_run == 8
    # one recording, made once; every trial replayed it
    assert out.speedup["recordings"] == 1 and out.speedup["live_seconds_estimate"] > 0
    # what the replays took against what the steps they used took when recorded (the toy LMs are instant)
    assert out.speedup["replay_seconds"] > 0 and out.speedup["speedup_replay_only"] > 0
    assert out.speedup["speedup_total"] is not None
    recorded_calls = sum(lm.calls for lm in lms.values())
    assert list((tmp_path / "replay").glob("*.jsonl"))
    # the best policy run live scores what its replay said
    assert out.verify["match"] == 1.0 and out.verify["live_em"] == pytest.approx(out.best_metrics["em"])
    assert out.best_values[0] == pytest.approx(out.best_metrics["em_cost"])
    baseline = {k: v for k, v in params_of(world.small).items() if k != "chain_beam"}  # not searched: not drawn
    assert out.baseline["number"] == 0 and out.baseline["params"] == baseline

    saved = read_program(out.path)
    assert saved.meta["best_params"] == out.best_params and saved.meta["objective"] == "em-cost"
    assert saved.config["accept_threshold"] == pytest.approx(out.best_params["accept_threshold"])
    assert SharpConfig.from_mapping(saved.config) == apply_params(world.small, out.best_params)

    parent = mlflow.get_run(out.run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["study"] == "toy"
    assert "best.accept_threshold" in parent.data.params and "best.em_cost" in parent.data.metrics
    assert {"replay.speedup_total", "replay.record_seconds", "verify.match", "default.em"} <= set(parent.data.metrics)
    trials = nested_runs(out.run_id)
    assert len(trials) == 8 and all(t.info.status == "FINISHED" for t in trials)
    assert all("em_cost" in t.data.metrics and "accept_threshold" in t.data.params for t in trials)
    files = artifact_paths(out.run_id)
    assert {"plots/history.png", "tune_report.json", "program/toy.json"} <= set(files)

    # resuming to 10 trials runs 2 more from the recording on disk: no LM call
    job.n_trials, job.verify = 10, False
    again = run_tune(job, base, world.examples(), workspace=tmp_path, study_name="toy")
    assert again.trials_run == 2 and len(nested_runs(again.run_id)) == 2
    assert again.speedup["recordings"] == 0 and sum(lm.calls for lm in lms.values()) == recorded_calls


def test_multi_objective_plots_the_pareto_front(world, tmp_path, tracked):
    job = TuneJob(objective="f1-cost", n_trials=6, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE)
    out = run_tune(job, world.program(), world.examples(), workspace=tmp_path, study_name="pareto")
    assert len(out.best_values) == 2
    files = artifact_paths(out.run_id)
    assert {"plots/pareto_front.png", "plots/history_f1.png", "plots/history_lm_calls_per_q.png"} <= set(files)
    front = optuna.load_study(study_name="pareto", storage=job.storage).best_trials
    assert max(t.values[0] for t in front) == pytest.approx(out.best_values[0])


def test_interrupted_study_marks_the_run_and_resumes(world, tmp_path, tracked, monkeypatch):
    from optimize import replay

    real = replay.score
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(replay, "score", interrupted)
    job = TuneJob(n_trials=5, storage=f"sqlite:///{tmp_path}/optuna.db", space=TOY_SPACE)
    with pytest.raises(KeyboardInterrupt):
        run_tune(job, world.program(), world.examples(), workspace=tmp_path, study_name="cut")
    (parent,) = [r for r in tracked.runs() if r.data.tags.get("kind") == "tune"]
    assert parent.info.status in ("KILLED", "FAILED")  # never left RUNNING
    assert len(nested_runs(parent.info.run_id)) == 2
    monkeypatch.setattr(replay, "score", real)
    out = run_tune(job, world.program(), world.examples(), workspace=tmp_path, study_name="cut")
    assert out.trials_run == 3 and mlflow.get_run(out.run_id).info.status == "FINISHED"


def test_a_space_that_asks_the_critic_grows_a_recording_without_critiques_reading_no_round_again(world, tmp_path):
    from optimize.recording import record

    examples = world.examples()[:3]
    path = tmp_path / "rec.jsonl"
    record(world.program(), examples, path, critique=False)
    off = ReplayScorer(world.program(), examples, path, needs_critic=False)
    metrics, recorded = off(params_of(world.small.replace(ask_critic="off")))
    assert recorded and metrics["n"] == 3
    forms = {k: v for k, v in metrics.items() if k.startswith("em.form.")}
    assert forms and all(0.0 <= v <= 1.0 for v in forms.values())  # each recorded form's EM, for --form-floors
    lms = world.lms()
    prog = world.program()
    world.assign(prog, lms)
    recs = ReplayScorer(prog, examples, path, needs_critic=True).records()
    assert all(r["critiqued"] for r in recs.values())
    assert lms["critic"].calls > 0 and lms["generator"].calls == lms["planner"].calls == 0


def test_only_sharp_can_be_tuned(world, tmp_path):
    from program.systems.vanilla import VanillaRAG

    with pytest.raises(ConfigError, match="tuning replays SHARP's repair loop"):
        ReplayScorer(VanillaRAG(world.retriever()), world.examples(), tmp_path / "rec.jsonl")


def test_the_history_plot_is_drawn_for_a_study_whose_trial_numbers_do_not_start_at_zero(tmp_path):
    # Optuna's history plot indexes the finished trials' values by trial number: a study whose stored trials
    # start at 1 (one was lost: the 2Wiki policy study, its trial 0 gone with a killed worker) raised
    # IndexError there, and the plot was lost
    import sqlite3

    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial
    from optuna.visualization import matplotlib as om

    from experiments.jobs.tune_job import _numbered_from_zero

    storage = f"sqlite:///{tmp_path / 'o.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    dist = {"accept_threshold": FloatDistribution(0.0, 1.0)}
    for v in (0.5, 0.1, 0.3, 0.2):
        study.add_trial(create_trial(value=v, params={"accept_threshold": v}, distributions=dist))
    with sqlite3.connect(tmp_path / "o.db") as db:
        db.execute("DELETE FROM trials WHERE number = 0")
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.number for t in study.trials] == [1, 2, 3]
    with pytest.raises(IndexError):
        om.plot_optimization_history(study)  # the library's own failure, which the copy avoids
    copy = _numbered_from_zero(study)
    assert [t.number for t in copy.trials] == [0, 1, 2] and [t.value for t in copy.trials] == [0.1, 0.3, 0.2]
    om.plot_optimization_history(copy)  # draws


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parents[2].glob("experiments/spaces/*.yaml")))
def test_every_committed_search_space_loads(path):
    space = load_space(path)
    assert space.ask_critic and space.max_repairs  # a real space, its choices read


def test_a_lever_is_declared_once_and_every_policy_structure_derives_from_it():
    """program.sharp.policy.LEVERS (the Lever annotations on SharpConfig's fields) is the one place a policy
    lever is written: the tuned fields, the search space's choices and float ranges, the exploring policy and
    the neutral policy all come from it."""
    from program.sharp.policy import KEEP, LEVERS, Explore, neutral_policy

    assert tuple(LEVERS) == TUNED_FIELDS and "chain_answer" in LEVERS
    space, explore, neutral = SearchSpace(), Explore(critique=False), neutral_policy()
    for name, lever in LEVERS.items():
        assert name in SharpConfig.model_fields
        if isinstance(lever.search, tuple):
            assert getattr(space, name) == lever.search
        else:
            assert name in float_ranges(space)
        if name not in ("ask_critic", "focus_when"):  # the recording's own: critiqued or not, flagged or not
            assert getattr(explore, name) == lever.explore
        assert neutral.get(name, KEEP) is lever.neutral or neutral[name] == lever.neutral
        # a search choice and the config value it stands for round-trip
        value = getattr(SharpConfig(), name)
        assert lever.setting(lever.choice(value)) == value
    assert LEVERS["yes_threshold"].setting("off") is None and LEVERS["yes_threshold"].setting(False) is None
    assert LEVERS["span_rule"].setting(False) == "off" and LEVERS["repair_bridge"].setting("none") == ()
    assert "union" in LEVERS["chain_answer"].valid and SearchSpace(chain_answer=("hop", "union"))
    with pytest.raises(ConfigError, match=r"chain_answer.0: Input should be 'hop' or 'union'"):
        SearchSpace.from_mapping({"chain_answer": ["both"]})
