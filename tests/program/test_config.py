"""program/config.py: a config's copy with changes applies every change, None included (a None that
vanished silently kept a shipped program's yes/no threshold in the studies' "draft only" baseline)."""

from __future__ import annotations

import pytest

from program.errors import ConfigError
from program.sharp.policy import SharpConfig


def test_replace_with_none_turns_a_setting_off():
    cfg = SharpConfig(yes_threshold=0.7, yes_threshold_sub=0.3)
    off = cfg.replace(yes_threshold=None, yes_threshold_sub=None, max_repairs=0)
    assert off.yes_threshold is None and off.yes_threshold_sub is None and off.max_repairs == 0
    assert cfg.yes_threshold == 0.7  # the original is untouched (frozen)


def test_from_mapping_overrides_of_none_still_mean_not_given():
    cfg = SharpConfig.from_mapping({"yes_threshold": 0.7}, yes_threshold=None)
    assert cfg.yes_threshold == 0.7


def test_replace_validates_and_names_an_unknown_key():
    with pytest.raises(ConfigError, match="unknown key 'no_such_key'"):
        SharpConfig().replace(no_such_key=1)


def test_a_bare_off_read_by_yaml_as_false_is_the_off_the_user_wrote():
    import yaml

    cfg = SharpConfig.from_mapping(yaml.safe_load("ask_critic: off\nspan_rule: off"))
    assert cfg.ask_critic == "off" and cfg.span_rule == "off"
    with pytest.raises(ConfigError, match="ask_critic"):  # a bare `on` names no choice: refused, not guessed
        SharpConfig.from_mapping(yaml.safe_load("ask_critic: on"))
