"""SHARP with real LMs on a fake OpenAI server: a failing *service* fails the question (no fallback answer),
a weak model's *unparseable reply* is still answered around, and such a reply is never replayed from
DSPy's cache to a later run."""

from __future__ import annotations

import pytest
from doubles import KeywordRetriever, RaisingLM, ScriptedLM, assign
from fake_openai import sharp_answer

from program.errors import LMError, LMProviderError, LMUnavailableError
from program.lm import LMConfig, LMContextOverflowError, LMEmptyReplyError, assign_lms
from program.lm.cache import cold_cache
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig

Q = "What nationality is the director of Pulp Fiction?"


def sharp_on(base: str, **spec) -> SharpRAG:
    """SHARP whose critic reads the drafts the gate is unsure of (every draft here: no log-probabilities)."""
    prog = SharpRAG(KeywordRetriever(), SharpConfig(ask_critic="band"))
    default = {"model": "openai/test", "api_base": base, "num_retries": 1, "retry_backoff_s": 0.01, "timeout_s": 5}
    assign_lms(prog, LMConfig.from_mapping({"default": {**default, **spec}}))
    return prog


@pytest.fixture
def served(fake_openai, tmp_path):
    fake_openai.answer = sharp_answer
    with cold_cache(tmp_path / "cache", disk=False):
        yield fake_openai


@pytest.mark.parametrize(
    "mode, error, attempts",
    [
        ("500", LMProviderError, 2),
        ("not-json", LMProviderError, 1),
        ("html", LMProviderError, 1),
        ("empty", LMEmptyReplyError, 2),
    ],
)
def test_a_failing_server_fails_the_question_instead_of_answering_unknown(served, mode, error, attempts):
    served.mode = mode
    with pytest.raises(error) as info:
        sharp_on(served.base)(question=Q)
    assert "role generator" in str(info.value) and served.base in str(info.value)
    assert len(served.requests) == attempts  # the draft's attempts; nothing after a failed service is called


def test_a_server_failing_midway_fails_the_question(served):
    served.script = ["ok", "500", "500"]  # the draft is read, then the critic fails twice
    with pytest.raises(LMProviderError, match="role critic"):
        sharp_on(served.base)(question=Q)
    assert len(served.requests) == 3  # no repair: the question failed


def test_the_same_server_working_answers(served):
    pred = sharp_on(served.base)(question=Q)
    # no log-probabilities from this server: the draft's P is 0.5, in the critic's band; the critic supports it
    assert pred.answer == "American" and pred.stop_reason == "confident" and len(served.requests) == 2
    draft = next(s for s in pred.trace if s["role"] == "generator")
    assert draft["answer_confidence"] is None and draft["confidence_problem"] == "no log-probabilities"
    assert served.requests[0].get("logprobs") is True  # asked for, not returned


def test_garbage_replies_are_answered_around_and_never_replayed_from_the_cache(fake_openai, tmp_path):
    fake_openai.answer, fake_openai.mode = sharp_answer, "garbage"
    cache = tmp_path / "shared-cache"
    with cold_cache(cache):  # run 1: a weak model's garbage is not a failure of the question
        pred = sharp_on(fake_openai.base)(question=Q)
    steps = [s for s in pred.trace if s["role"] in ("planner", "critic", "generator", "composer")]
    assert all(s["error"].startswith("AdapterParseError") for s in steps) and pred.answer != "American"
    # a discarded critique leaves the draft at the gate's 0.5: the retrieval repair reads again
    assert [s["role"] for s in steps] == ["generator", "critic", "generator", "critic"]
    assert all(s["critic_problem"] for s in steps if s["role"] == "critic")
    first = len(fake_openai.requests)
    assert first == 4

    fake_openai.mode = "ok"
    with cold_cache(cache):  # run 2, a fresh process on the same disk cache: the model is asked again
        pred = sharp_on(fake_openai.base)(question=Q)
    assert len(fake_openai.requests) == first + 2 and pred.answer == "American"
    assert pred.cost["cached_calls"] == 0

    with cold_cache(cache):  # run 3: replies that were used are cached as before
        pred = sharp_on(fake_openai.base)(question=Q)
    assert len(fake_openai.requests) == first + 2 and pred.answer == "American"
    assert pred.cost["cached_calls"] == 2


def run_with_critic(critic_lm):
    prog = SharpRAG(KeywordRetriever(), SharpConfig(ask_critic="band", max_repairs=0))
    lms = {
        "planner": ScriptedLM("planner", []),
        "critic": critic_lm,
        "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        "composer": ScriptedLM("generator", []),
    }
    assign(prog, lms)
    return prog(question=Q), lms


def test_a_prompt_too_long_for_the_model_still_falls_back():
    pred, lms = run_with_critic(RaisingLM("critic", LMContextOverflowError("the prompt does not fit")))
    critic = next(s for s in pred.trace if s["role"] == "critic")
    assert critic["error"].startswith("LMContextOverflowError") and critic["verdict"] is None
    assert critic["critic_problem"] == "unparseable"  # discarded: the draft stands as the gate judged it
    (judged,) = [s for s in pred.trace if s["role"] == "judgement"]
    assert judged["source"] == "gate" and judged["p_right"] == 0.5
    assert pred.answer == "American" and lms["generator"].calls == 1


def test_an_unreachable_critic_fails_the_question():
    critic = RaisingLM("critic", LMUnavailableError("cannot reach the critic"))
    with pytest.raises(LMError, match="cannot reach the critic"):
        run_with_critic(critic)
    assert critic.calls == 1
