"""The LM layer against a real fake server: empty replies are failures (retried, never cached), a failure
of the service is told apart from a model's unparseable reply, and a server that is down is found by a
probe before any work."""

from __future__ import annotations

import socket

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError, ContextWindowExceededError, LMServerError

from program.errors import LMError, LMProviderError, LMTimeoutError, LMUnavailableError, ModelFileError
from program.lm import LMConfig, LMContextOverflowError, LMEmptyReplyError, LMSpec, build_lm, recording
from program.lm.failures import is_service_failure
from program.lm.probe import check_endpoint, check_endpoints, endpoints


def make_lm(base: str, **spec):
    spec = {"model": "openai/test-model", "api_base": base, "timeout_s": 2, "num_retries": 2, "retry_backoff_s": 0.01}
    return build_lm(LMSpec(**spec), "generator")


def test_an_empty_reply_is_retried_and_the_good_reply_returned(fake_openai):
    fake_openai.script = ["empty"]
    lm = make_lm(fake_openai.base)
    with recording() as ledger:
        assert lm("hello") == ["reply 2"]
    assert len(fake_openai.requests) == 2 and ledger.records[0].error is None
    assert lm("hello") == ["reply 2"] and len(fake_openai.requests) == 2  # the good reply is cached


def test_the_async_path_retries_an_empty_reply_too(fake_openai):
    import asyncio

    fake_openai.script = ["empty"]
    assert asyncio.run(make_lm(fake_openai.base).acall("hello")) == ["reply 2"]
    assert len(fake_openai.requests) == 2


def test_empty_replies_fail_the_call_and_are_not_cached(fake_openai):
    fake_openai.mode = "empty"
    lm = make_lm(fake_openai.base)
    with recording() as ledger, pytest.raises(LMEmptyReplyError, match="empty reply .* after 3 attempts") as info:
        lm("hello")
    assert len(fake_openai.requests) == 3 and ledger.records[0].error.startswith("LMEmptyReplyError")
    assert "openai/test-model" in str(info.value) and fake_openai.base in str(info.value)
    fake_openai.mode = "ok"
    assert lm("hello") == ["reply 4"]  # asked again: no empty reply was left in the cache
    assert len(fake_openai.requests) == 4


@pytest.mark.parametrize(
    "exc, service",
    [
        (LMUnavailableError("down"), True),
        (LMTimeoutError("slow"), True),
        (LMProviderError("HTTP 500"), True),
        (LMEmptyReplyError("nothing"), True),
        (LMServerError("unmapped DSPy error"), True),
        (LMContextOverflowError("too long"), False),
        (ContextWindowExceededError(message="too long"), False),
        (AdapterParseError(adapter_name="JSONAdapter", signature=dspy.Signature("q -> a"), lm_response="@@@"), False),
        (ValueError("bad field"), False),
        (ModelFileError("no weights"), False),
    ],
)
def test_service_failures_are_told_apart_from_the_models_failures(exc, service):
    assert is_service_failure(exc) is service


def test_probe_passes_for_a_server_that_answers(fake_openai, caplog):
    with caplog.at_level("WARNING", logger="program.lm.probe"):
        check_endpoint(fake_openai.base)
        assert fake_openai.gets == ["/v1/models"] and fake_openai.requests == []  # no completion is spent
        assert caplog.text == ""
        check_endpoint(fake_openai.base.replace("/v1", ""))  # a 404: a server is there, likely a wrong path
    assert "not as an OpenAI-compatible API" in caplog.text and "/v1" in caplog.text


def test_probe_names_the_url_and_how_to_start_the_server(closed_port_base):
    with pytest.raises(LMUnavailableError) as info:
        check_endpoint(closed_port_base, model="openai/local")
    text = str(info.value)
    assert closed_port_base in text and "sharp lm serve" in text and "--api-base" in text and "openai/local" in text
    assert isinstance(info.value, LMError)


@pytest.mark.parametrize("base", ["127.0.0.1:8008/v1", "http://[::1/v1", "http://exa mple/v1"])
def test_probe_of_a_wrong_url_names_it_and_how_to_start_the_server(base):
    """No scheme, a broken host, a space: each one is the same clear error, never a traceback."""
    with pytest.raises(LMUnavailableError) as info:
        check_endpoint(base)
    assert base in str(info.value) and "sharp lm serve" in str(info.value)


def test_probe_of_a_server_that_never_answers_times_out():
    with socket.socket() as sock:  # accepts connections (the backlog) but never says a word
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        with pytest.raises(LMUnavailableError, match=r"no answer within 0\.3s"):
            check_endpoint(base, timeout_s=0.3)


def test_probe_checks_each_server_the_roles_call_once(fake_openai, closed_port_base):
    assert endpoints(LMConfig()) == {}  # the default local model has no server
    cfg = LMConfig().with_overrides(lm="openai/local", api_base=fake_openai.base)
    assert list(endpoints(cfg)) == [fake_openai.base]
    check_endpoints(cfg)
    assert fake_openai.gets == ["/v1/models"]
    split = LMConfig.from_mapping(
        {"default": {"model": "openai/local", "api_base": fake_openai.base}, "critic": {"api_base": closed_port_base}}
    )
    with pytest.raises(LMUnavailableError, match=closed_port_base):
        check_endpoints(split)
    check_endpoints(split, roles=("planner", "generator"))  # the critic's server is not needed here
