"""Model strings, specs, per-role resolution, CLI overrides, predictor roles."""

from __future__ import annotations

from typing import ClassVar

import dspy
import pytest

from program.errors import ConfigError
from program.lm import (
    DEFAULT_MODEL,
    LOCAL_MODELS,
    ROLES,
    LMConfig,
    LMSpec,
    SharpLM,
    assign_lms,
    parse_model_string,
    role_of,
)


@pytest.mark.parametrize(
    "model, provider, name",
    [
        ("openai/gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("groq/llama-3.1-8b-instant", "groq", "llama-3.1-8b-instant"),
        ("ollama_chat/qwen2.5:1.5b", "ollama_chat", "qwen2.5:1.5b"),
        ("openai/local", "openai", "local"),
        ("local/qwen2.5-coder-0.5b", "local", "qwen2.5-coder-0.5b"),
    ],
)
def test_parse_model_string(model, provider, name):
    ref = parse_model_string(model)
    assert (ref.provider, ref.name, str(ref)) == (provider, name, model)
    assert ref.is_local == (provider == "local")


@pytest.mark.parametrize("bad", ["gpt-4o", "openai/", "/x", "", "Open AI/x"])
def test_bad_model_strings_are_config_errors(bad):
    with pytest.raises(ConfigError, match="provider"):
        parse_model_string(bad)


def test_unknown_local_model_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        parse_model_string("local/llama-70b")
    for name in LOCAL_MODELS:
        assert f"local/{name}" in str(err.value)


def test_spec_defaults_and_validation():
    spec = LMSpec()
    assert spec.model == DEFAULT_MODEL and spec.temperature == 0.0 and spec.cache is True
    assert spec.n_threads == 2 and spec.n_ctx >= 4096
    with pytest.raises(ConfigError, match="temperature"):
        LMSpec.from_mapping({"temperature": 3})
    with pytest.raises(ConfigError, match="unknown key 'temprature'"):
        LMSpec.from_mapping({"temprature": 0.5})
    with pytest.raises(ConfigError, match="local/"):
        LMSpec.from_mapping({"model": "local/nope"})
    with pytest.raises(ConfigError, match="api_base"):
        LMSpec.from_mapping({"api_base": "127.0.0.1:8008"})


def test_api_key_env_takes_a_name_and_never_echoes_a_key():
    assert LMSpec(api_key_env="OPENAI_API_KEY").api_key_env == "OPENAI_API_KEY"
    with pytest.raises(ConfigError) as err:
        LMSpec.from_mapping({"api_key_env": "sk-live-1234567890abcdef"})
    assert "sk-live-1234567890abcdef" not in str(err.value)


def test_resolve_merges_partial_role_overrides():
    cfg = LMConfig.from_mapping(
        {
            "default": {"model": "openai/gpt-4o-mini", "max_tokens": 300, "api_key_env": "OPENAI_API_KEY"},
            "critic": {"temperature": 0.7},
            "generator": "groq/llama-3.1-8b-instant",  # shorthand for {model: ...}
        }
    )
    critic = cfg.resolve("critic")
    assert (critic.model, critic.temperature, critic.max_tokens) == ("openai/gpt-4o-mini", 0.7, 300)
    assert critic.api_key_env == "OPENAI_API_KEY"  # same model: connection inherited
    gen = cfg.resolve("generator")
    assert gen.model == "groq/llama-3.1-8b-instant" and gen.max_tokens == 300
    assert gen.api_key_env is None  # another model: not the default's key
    assert cfg.resolve("planner") == cfg.resolve("default") == cfg.default
    with pytest.raises(ConfigError, match="unknown LM role"):
        cfg.resolve("retriever")


def test_role_override_with_a_bad_value_names_the_role():
    cfg = LMConfig.from_mapping({"judge": {"temperature": 5}})
    with pytest.raises(ConfigError, match="judge"):
        cfg.resolve("judge")


def test_cli_overrides():
    cfg = LMConfig().with_overrides(
        lm="openai/local", api_base="http://127.0.0.1:8008/v1", critic_lm="openai/gpt-4o-mini", proposer_lm=None
    )
    assert cfg.resolve("planner").api_base == "http://127.0.0.1:8008/v1"
    assert cfg.resolve("critic").model == "openai/gpt-4o-mini" and cfg.resolve("critic").api_base is None
    assert cfg.summary()["proposer"] == "openai/local"
    again = cfg.with_overrides(lm="local/smollm2-135m")
    assert again.resolve("generator").api_base is None  # a new default model drops the old endpoint
    assert again.resolve("critic").model == "openai/gpt-4o-mini"
    with pytest.raises(ConfigError, match="retriever_lm"):
        LMConfig().with_overrides(retriever_lm="openai/x")
    with pytest.raises(ConfigError):
        LMConfig().with_overrides(judge_lm="local/unknown")


class Pipeline(dspy.Module):
    ROLE_MAP: ClassVar[dict[str, str]] = {"hop": "planner", "verify": "critic"}

    def __init__(self):
        super().__init__()
        self.planner = dspy.Predict("question -> queries")
        self.critic = dspy.ChainOfThought("question, evidence -> verdict")
        self.hop = dspy.Predict("question -> query")
        self.verify = dspy.Predict("claim -> ok")
        self.answerer = dspy.Predict("question -> answer")


def test_role_of():
    p = Pipeline()
    assert role_of("critic.predict", p) == "critic"
    assert role_of("planner", p) == "planner"
    assert role_of("hop", p) == "planner"
    assert role_of("verify.predict", p) == "critic"
    assert role_of("answerer", p) == "generator"
    assert role_of("hops[1].predict", dspy.Module()) == "generator"
    assert set(ROLES) == {"planner", "critic", "generator", "judge", "proposer"}


def test_assign_lms_sets_each_predictor_by_role(fake_openai):
    p = Pipeline()
    cfg = LMConfig.from_mapping(
        {
            "default": {"model": "openai/base", "api_base": fake_openai.base},
            "critic": {"model": "openai/crit", "api_base": fake_openai.base},
        }
    )
    roles = assign_lms(p, cfg)
    assert roles == {
        "planner": "planner",
        "critic.predict": "critic",
        "hop": "planner",
        "verify": "critic",
        "answerer": "generator",
    }
    preds = dict(p.named_predictors())
    assert all(isinstance(pr.lm, SharpLM) for pr in preds.values())
    assert preds["critic.predict"].lm.model == "openai/crit" and preds["critic.predict"].lm.role == "critic"
    assert preds["verify"].lm is preds["critic.predict"].lm  # one LM per (role, spec)
    assert preds["planner"].lm.role == "planner" and preds["answerer"].lm.role == "generator"
    assign_lms(p, None)
    assert all(pr.lm is None for _, pr in p.named_predictors())


def test_bad_role_map_entry_is_a_config_error():
    class Odd(dspy.Module):
        ROLE_MAP: ClassVar[dict[str, str]] = {"x": "retriever"}

        def __init__(self):
            super().__init__()
            self.x = dspy.Predict("a -> b")

    with pytest.raises(ConfigError, match="ROLE_MAP"):
        role_of("x", Odd())
