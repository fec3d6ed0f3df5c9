"""Optimizer registry: names, minimum train sizes, settings, one budget for GEPA, compile with bootstrap."""

from __future__ import annotations

import json

import dspy
import pytest

from experiments.reports.prompts import describe_program, render_prompts
from optimize.compiler import compile_program
from optimize.feedback import answer_feedback_metric
from optimize.metrics import answer_f1
from optimize.optimizers import (
    OPTIMIZERS,
    OptimizerContext,
    TrainSetTooSmallError,
    UnknownOptimizerError,
    build_optimizer,
    check_sizes,
)
from program.errors import ConfigError


def ctx(**kw):
    return OptimizerContext(metric=answer_f1, feedback_metric=answer_feedback_metric("f1"), n_train=20, **kw)


def test_unknown_optimizer_lists_the_valid_ones():
    with pytest.raises(
        UnknownOptimizerError, match="unknown optimizer 'miprov3'.*bootstrap, bootstrap-rs, mipro, simba, gepa"
    ):
        check_sizes("miprov3", 10, 10)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_train_split_below_the_minimum_is_refused(name):
    need = OPTIMIZERS[name].min_train
    with pytest.raises(TrainSetTooSmallError, match=f"at least {need} training examples, got {need - 1}"):
        check_sizes(name, need - 1, 5)
    check_sizes(name, need, 5)


def test_valset_required_where_candidates_are_scored():
    with pytest.raises(TrainSetTooSmallError, match="validation split"):
        check_sizes("bootstrap-rs", 10, 0)
    check_sizes("bootstrap", 10, 0)  # bootstrap does not score candidates


def test_proposer_needed_for_instruction_optimizers(world):
    for name in ("mipro", "simba", "gepa"):
        with pytest.raises(ConfigError, match="needs a proposer LM"):
            build_optimizer(name, ctx())
    lm = world.rule_lm("proposer", lambda f: {})
    settings = build_optimizer("mipro", ctx(proposer_lm=lm, task_lm=lm)).settings
    assert settings["auto"] == "light" and settings["num_threads"] == 1 and settings["prompt_model"] == "dummy"


def test_small_data_defaults_and_unknown_settings():
    built = build_optimizer("bootstrap", ctx())
    opt, settings = built.optimizer, built.settings
    assert (opt.max_bootstrapped_demos, opt.max_labeled_demos) == (2, 2)
    assert settings["metric"] == "answer_f1"
    assert build_optimizer("bootstrap", ctx(), {"max_labeled_demos": 0}).optimizer.max_labeled_demos == 0
    with pytest.raises(ConfigError, match="unknown setting.*max_demoz.*valid settings: .*max_bootstrapped_demos"):
        build_optimizer("bootstrap", ctx(), {"max_demoz": 3})


def test_gepa_takes_exactly_one_budget(world):
    lm = world.rule_lm("proposer", lambda f: {})
    settings = build_optimizer("gepa", ctx(proposer_lm=lm)).settings
    assert settings["max_full_evals"] == 3 and "auto" not in settings
    settings = build_optimizer("gepa", ctx(proposer_lm=lm), {"auto": "light"}).settings
    assert settings["auto"] == "light" and "max_full_evals" not in settings
    with pytest.raises(ConfigError, match="exactly one budget"):
        build_optimizer("gepa", ctx(proposer_lm=lm), {"auto": "light", "max_metric_calls": 50})


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_registered_optimizer_builds_with_its_defaults(world, name):
    lm = world.rule_lm("proposer", lambda f: {})
    built = build_optimizer(name, ctx(proposer_lm=lm, task_lm=lm))
    assert isinstance(built.optimizer, dspy.teleprompt.Teleprompter)
    assert json.loads(json.dumps(built.settings)) == built.settings  # loggable as it is
    assert built.settings.get("num_threads", 1) == 1  # single-threaded: the cost ledger sees every call


def test_simba_batch_cannot_exceed_the_train_split(world):
    lm = world.rule_lm("proposer", lambda f: {})
    assert build_optimizer("simba", ctx(proposer_lm=lm)).settings["bsize"] == 8  # min(8, n_train)
    with pytest.raises(TrainSetTooSmallError, match=r"bsize \(24\) exceeds the train split \(20\)"):
        build_optimizer("simba", ctx(proposer_lm=lm), {"bsize": 24, "max_steps": 1})


def test_gepa_needs_a_feedback_metric(world):
    lm = world.rule_lm("proposer", lambda f: {})
    with pytest.raises(ConfigError, match="needs a feedback metric"):
        build_optimizer("gepa", OptimizerContext(metric=answer_f1, proposer_lm=lm))


def test_simba_refuses_different_lms_per_role(world):
    prog = world.program()
    with pytest.raises(ConfigError, match="one LM"):
        # the rule LMs are three objects but look alike; give the critic a distinguishable one
        prog.critic.lm = type("Other", (), {"model": "other/model"})()
        compile_program(
            prog, "simba", world.examples()[:6], metric=answer_f1, proposer_lm=world.rule_lm("proposer", lambda f: {})
        )


def test_bootstrap_compiles_every_predictor_and_accounts_the_cost(world):
    prog = world.program()
    examples = world.examples()
    res = compile_program(prog, "bootstrap", examples[:6], metric=answer_f1, metric_threshold=0.6)
    compiled = res.program
    desc = describe_program(compiled)
    assert set(desc) == {"planner", "critic", "generator", "composer", "focuser", "hop_planner"}
    # demos bootstrapped from successful traces (of the roles that ran in them), the labeled ones capped at 2
    assert all(len(d["demos"]) <= 4 for d in desc.values()) and desc["generator"]["demos"]
    assert any(demo.get("augmented") for demo in desc["critic"]["demos"])
    assert res.cost["lm_calls"] > 0 and {"critic", "generator"} <= set(res.cost["by_role"])
    assert res.settings["max_bootstrapped_demos"] == 2
    # the roles keep their own LMs and the retriever is the original object, not a copy
    assert [p.lm.role for _, p in compiled.named_predictors()] == [
        "planner",
        "critic",
        "generator",
        "composer",
        "focuser",
        "hop_planner",
    ]
    assert compiled.retriever is prog.retriever
    assert prog.generator.demos == []  # the student itself is untouched
    assert compiled(question=examples[0].question).answer == "American"
    assert "## critic" in render_prompts(desc)


def test_mipro_takes_a_small_explicit_budget_at_compile_time(world):
    lm = world.rule_lm("proposer", lambda f: {})
    opts = {"num_candidates": 2, "num_trials": 3, "minibatch": False}
    built = build_optimizer("mipro", ctx(proposer_lm=lm, task_lm=lm), opts)
    assert built.optimizer.auto is None and built.optimizer.num_candidates == 2  # explicit budget replaced "light"
    assert built.settings["num_trials"] == 3 and built.settings["minibatch"] is False  # logged with the rest
    # the search budget goes to .compile(), with the permission prompt turned off
    assert built.compile_kwargs == {"num_trials": 3, "minibatch": False, "requires_permission_to_run": False}
    assert build_optimizer("bootstrap", ctx(), {"max_labeled_demos": 1}).compile_kwargs == {}
    with pytest.raises(ConfigError, match="num_candidates and num_trials"):
        build_optimizer("mipro", ctx(proposer_lm=lm, task_lm=lm), {"num_candidates": 2})
    with pytest.raises(ConfigError, match="unknown setting.*num_trialz.*num_trials"):
        build_optimizer("mipro", ctx(proposer_lm=lm, task_lm=lm), {"num_trialz": 2})


def proposer_rule(fields: dict) -> dict:
    """Every output field MIPROv2's grounded proposer asks for, answered plainly."""
    return {
        "observations": "short factual questions",
        "summary": "trivia questions over passages",
        "program_description": "plans, retrieves, critiques, answers",
        "module_description": "one step",
        "proposed_instruction": "Answer with the exact entity name from the evidence.",
    }


def test_mipro_compiles_the_whole_program_on_a_small_budget(world):
    prog = world.program()
    examples = world.examples()
    proposer = world.rule_lm("proposer", proposer_rule)
    res = compile_program(
        prog,
        "mipro",
        examples[:8],
        examples[:2],
        metric=answer_f1,
        proposer_lm=proposer,
        task_lm=dict(prog.named_predictors())["generator"].lm,
        overrides={"num_candidates": 2, "num_trials": 2, "minibatch": False},
        metric_threshold=0.6,
    )
    assert res.settings["num_trials"] == 2 and res.settings["auto"] is None
    assert res.cost["by_role"]["proposer"]["lm_calls"] > 0  # instructions were proposed...
    assert res.cost["by_role"]["generator"]["lm_calls"] >= 2 * 3  # ...and default + 2 trials scored on 2 val q
    # each role kept its own LM through the search
    assert {n.split(".")[0]: p.lm.role for n, p in res.program.named_predictors()} == {
        "planner": "planner",
        "critic": "critic",
        "generator": "generator",
        "composer": "composer",
        "focuser": "focuser",
        "hop_planner": "hop_planner",
    }
    assert res.program(question=examples[0].question).answer == "American"


def test_frozen_roles_keep_their_demos_and_instructions(world):
    prog = world.program()
    critic = dict(prog.named_predictors())["critic"]
    gold = dspy.Example(evidence="[1] A: a", question="q", draft_answer="a", verdict="supported", confidence=0.9)
    assert set(gold.keys()) == set(critic.signature.fields)  # a demo of the critic's own fields (CritiqueAnswer)
    critic.demos = [gold]
    critic.signature = critic.signature.with_instructions("A compiled critic's instructions.")
    examples = world.examples()
    res = compile_program(prog, "bootstrap", examples[:6], metric=answer_f1, metric_threshold=0.6, freeze=["critic"])
    out = dict(res.program.named_predictors())
    assert [d["verdict"] for d in out["critic"].demos] == ["supported"] and len(out["critic"].demos) == 1
    assert out["critic"].signature.instructions == "A compiled critic's instructions."
    assert out["critic"].lm.role == "critic"  # the role's LM, not one rebuilt from the saved state
    assert out["generator"].demos and out["planner"].demos  # the other roles were compiled
    assert res.program(question=examples[0].question).answer == "American"
    with pytest.raises(
        ConfigError, match="cannot freeze 'critc'.*composer, critic, focuser, generator, hop_planner, planner"
    ):
        compile_program(prog, "bootstrap", examples[:6], metric=answer_f1, freeze=["critc"])


def test_freeze_is_for_whole_program_compiles():
    from experiments.jobs.compile_job import CompileJob

    with pytest.raises(ConfigError, match="--target critic compiles the critic alone"):
        CompileJob(target="critic", freeze=("critic",))


def test_gepa_reflects_only_on_the_predictors_it_may_change(world):
    from optimize.optimizers import ThawedRoundRobin

    lm = world.rule_lm("proposer", lambda f: {})
    built = build_optimizer("gepa", ctx(proposer_lm=lm, frozen=("planner", "critic")))
    assert built.settings["component_selector"] == "ThawedRoundRobin"
    assert "component_selector" not in build_optimizer("gepa", ctx(proposer_lm=lm)).settings  # GEPA's own
    pick = ThawedRoundRobin(("planner", "critic"))
    candidate = {"planner": "i", "critic": "i", "generator": "i", "composer.predict": "i"}
    turns = [pick(None, [], [], 0, candidate) for _ in range(3)]
    assert turns == [["generator"], ["composer.predict"], ["generator"]]
    assert pick(None, [], [], 1, candidate) == ["generator"]  # each candidate keeps its own turn
    with pytest.raises(ConfigError, match="every predictor is frozen"):
        ThawedRoundRobin(("planner",))(None, [], [], 0, {"planner": "i"})
