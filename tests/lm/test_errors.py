"""Failure paths against a fake OpenAI-compatible server: mapped, bounded, clear, no secrets."""

from __future__ import annotations

import logging

import pytest

from program.errors import LMError, LMProviderError, LMTimeoutError, LMUnavailableError
from program.lm import LMSpec, build_lm, recording, redact

KEY = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("SHARP_TEST_KEY", KEY)
    return "SHARP_TEST_KEY"


def make_lm(base: str, key_env: str, **spec):
    spec = {
        "model": "openai/test-model",
        "api_base": base,
        "api_key_env": key_env,
        "cache": False,
        "timeout_s": 0.5,
        "num_retries": 2,
        "retry_backoff_s": 0.01,
        **spec,
    }
    return build_lm(LMSpec(**spec), "critic")


def call(lm):
    with recording() as ledger:
        try:
            return lm("hello"), None, ledger.records
        except LMError as exc:
            return None, exc, ledger.records


def assert_clean(exc, records, caplog):
    text = str(exc) + repr(exc) + " ".join(str(r) for r in records) + caplog.text
    assert KEY not in text
    assert exc.__cause__ is None  # causes can carry request details; the message says enough


def test_ok_call_sends_the_key_and_records_usage(fake_openai, key_env):
    out, exc, records = call(make_lm(fake_openai.base, key_env))
    assert exc is None and out == ["reply 1"]
    assert fake_openai.auth == [f"Bearer {KEY}"]
    assert records[0].prompt_tokens == 11 and records[0].completion_tokens == 3 and not records[0].cached


def test_server_errors_are_retried_with_backoff_then_reported(fake_openai, key_env, caplog):
    fake_openai.mode = "500"
    _, exc, records = call(make_lm(fake_openai.base, key_env))
    assert type(exc) is LMProviderError and "server error after 3 attempts" in str(exc)
    assert len(fake_openai.requests) == 3
    assert len(records) == 1 and records[0].error.startswith("LMProviderError")
    assert_clean(exc, records, caplog)


@pytest.mark.parametrize(
    "mode, words",
    [
        ("429", "rate limited"),
        ("401", "refused the credentials"),
        ("404", "does not know this model"),
        ("not-json", "garbled"),
    ],
)
def test_provider_refusals_fail_once_and_clearly(fake_openai, key_env, caplog, mode, words):
    fake_openai.mode = mode
    _, exc, records = call(make_lm(fake_openai.base, key_env))
    assert type(exc) is LMProviderError and words in str(exc)
    assert "openai/test-model" in str(exc) and "critic" in str(exc)
    assert len(fake_openai.requests) == 1  # no retry loop on a refusal
    if mode == "401":
        assert "$SHARP_TEST_KEY" in str(exc)  # the variable's name, never its value
    assert_clean(exc, records, caplog)


def test_timeouts_are_retried_a_bounded_number_of_times(fake_openai, key_env, caplog):
    fake_openai.mode, fake_openai.sleep_s = "sleep", 1.5
    with caplog.at_level(logging.WARNING):
        _, exc, records = call(make_lm(fake_openai.base, key_env, num_retries=1))
    assert isinstance(exc, LMTimeoutError) and isinstance(exc, TimeoutError)
    assert "2 attempts" in str(exc) and "0.5s" in str(exc)
    assert len(fake_openai.requests) == 2 and "retry 1/1" in caplog.text
    assert records[0].error.startswith("LMTimeoutError")
    assert_clean(exc, records, caplog)


def test_unreachable_endpoint_says_how_to_start_the_server(closed_port_base, key_env, caplog):
    _, exc, records = call(make_lm(closed_port_base, key_env))
    assert isinstance(exc, LMUnavailableError) and isinstance(exc, ConnectionError)
    assert closed_port_base in str(exc) and "sharp lm serve" in str(exc)
    assert len(records) == 1 and records[0].error
    assert_clean(exc, records, caplog)


def test_a_missing_key_variable_is_a_config_error(monkeypatch):
    from program.errors import ConfigError

    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match=r"\$NOT_SET_ANYWHERE"):
        build_lm(LMSpec(model="openai/gpt-4o-mini", api_key_env="NOT_SET_ANYWHERE"))


def test_redact():
    text = f"Authorization: Bearer {KEY} api_key='{KEY}' other sk-abcdefghijkl1234 and plain words"
    out = redact(text, [KEY])
    assert KEY not in out and "sk-abcdefghijkl1234" not in out and "plain words" in out
    assert redact("gsk_ABCDEFGHIJKLMNOP is a groq key") == "*** is a groq key"
