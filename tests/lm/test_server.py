"""`sharp lm serve`'s HTTP layer with a scripted session: OpenAI shape, schemas reach the model."""

from __future__ import annotations

import json
import threading
import urllib.request

import dspy
import pytest
from dspy.lm15 import ContextLengthError
from fake_openai import QUICK_SHUTDOWN

from program.errors import LMProviderError
from program.lm import LMSpec, build_lm, recording
from program.lm.local import ChatResult
from program.lm.server import chat_completion, make_server


class FakeSession:
    def __init__(self, text='{"verdict": "sufficient", "confidence": 0.8}'):
        self.text = text
        self.calls: list[dict] = []

    def chat(self, messages, **kw):
        self.calls.append({"messages": messages, **kw})
        if kw["max_tokens"] > 60000:
            raise ContextLengthError("the prompt has 10 tokens and max_tokens is huge")
        logprobs = None if kw.get("logprobs") is None else [(self.text, -0.1, [(self.text, -0.1), ("x", -2.5)])]
        return ChatResult(
            self.text, "stop", prompt_tokens=42, completion_tokens=7, reused_tokens=30, seconds=0.1, logprobs=logprobs
        )


@pytest.fixture
def served():
    session = FakeSession()
    server = make_server(session, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True)
    thread.start()
    yield session, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_chat_completion_shape():
    session = FakeSession("hello")
    out = chat_completion(
        session,
        {
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "sys"}]},
                {"role": "user", "content": "hi"},
            ],
            "max_tokens": 20,
            "temperature": 0,
            "stop": "END",
        },
    )
    assert out["choices"][0]["message"]["content"] == "hello" and out["model"] == "local"
    assert out["usage"] == {
        "prompt_tokens": 42,
        "completion_tokens": 7,
        "total_tokens": 49,
        "prompt_tokens_details": {"cached_tokens": 30},
    }
    call = session.calls[0]
    assert call["messages"][0] == {"role": "system", "content": "sys"} and call["stop"] == ["END"]
    with pytest.raises(ValueError, match="stream"):
        chat_completion(session, {"messages": [{"role": "user", "content": "x"}], "stream": True})


def test_health_models_and_errors(served):
    _, base = served
    root = base[: -len("/v1")]
    assert json.load(urllib.request.urlopen(f"{root}/health"))["status"] == "ok"
    assert json.load(urllib.request.urlopen(f"{base}/models"))["data"][0]["id"] == "local"
    req = urllib.request.Request(
        f"{base}/chat/completions", data=b"{bad json", method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code == 400


def test_dspy_through_the_server_sends_schemas_and_accounts_reuse(served):
    session, base = served
    lm = build_lm(LMSpec(model="openai/local", api_base=base, cache=False), "critic")
    sig = dspy.Signature("evidence -> verdict: str, confidence: float")
    with recording() as ledger, dspy.context(adapter=dspy.JSONAdapter()):
        out = dspy.Predict(sig)(evidence="Paris is in France.", lm=lm)
    assert out.verdict == "sufficient" and out.confidence == 0.8
    fmt = session.calls[0]["response_format"]
    schema = fmt.get("schema") or fmt["json_schema"]["schema"]
    assert set(schema["properties"]) == {"verdict", "confidence"}
    (rec,) = ledger.records
    assert (rec.role, rec.prompt_tokens, rec.completion_tokens, rec.reused_prompt_tokens) == ("critic", 42, 7, 30)


def test_context_overflow_through_the_server_is_a_clear_error(served):
    _, base = served
    lm = build_lm(LMSpec(model="openai/local", api_base=base, cache=False, max_tokens=65000), "generator")
    with pytest.raises(LMProviderError, match="max_tokens"):
        lm("hello")


def test_served_model_returns_token_logprobs_when_asked():
    session = FakeSession("sufficient")
    plain = chat_completion(session, {"messages": [{"role": "user", "content": "hi"}]})
    assert plain["choices"][0]["logprobs"] is None and session.calls[0]["logprobs"] is None
    out = chat_completion(
        session, {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 2}
    )
    assert session.calls[1]["logprobs"] == 2
    (tok,) = out["choices"][0]["logprobs"]["content"]
    assert tok["token"] == "sufficient" and [a["token"] for a in tok["top_logprobs"]] == ["sufficient", "x"]


def test_logprobs_reach_a_dspy_prediction_through_the_server(served):
    session, base = served
    lm = build_lm(LMSpec(model="openai/local", api_base=base, cache=False), "critic")
    sig = dspy.Signature("evidence -> verdict: str, confidence: float")
    with dspy.context(adapter=dspy.JSONAdapter()):
        out = dspy.Predict(sig)(evidence="Paris is in France.", lm=lm, config={"logprobs": True, "top_logprobs": 2})
    assert session.calls[0]["logprobs"] == 2
    assert out.logprobs["content"][0]["top_logprobs"][1]["token"] == "x"


class BlockingSession(FakeSession):
    """Answers only once ``release`` is set; says when a call has started."""

    def __init__(self, text):
        super().__init__(text)
        self.started, self.release = threading.Event(), threading.Event()

    def chat(self, messages, **kw):
        self.started.set()
        assert self.release.wait(10), "never released"
        return super().chat(messages, **kw)


def _post(base, timeout=10):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}).encode()
    req = urllib.request.Request(f"{base}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


@pytest.mark.parametrize("slots", [1, 2])
def test_slots_answer_side_by_side_and_one_slot_queues(slots):
    blocked, free = BlockingSession("first"), FakeSession("second")
    sessions = [blocked, free][:slots]
    server = make_server(sessions, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        answers: list[str] = []
        first = threading.Thread(target=lambda: answers.append(_post(base)))
        first.start()
        assert blocked.started.wait(5)  # the first request holds the first slot
        if slots == 2:
            assert _post(base) == "second"  # answered by the free slot while the first is still busy
            assert len(free.calls) == 1 and answers == []
        else:
            second = threading.Thread(target=lambda: answers.append(_post(base)))
            second.start()
            second.join(0.5)
            assert second.is_alive() and len(blocked.calls) == 0  # it waits for the only slot
        blocked.release.set()
        first.join(10)
        if slots == 1:
            second.join(10)
            assert answers == ["first", "first"] and len(blocked.calls) == 2
        else:
            assert answers == ["first"]
    finally:
        blocked.release.set()
        server.shutdown()
        server.server_close()


def test_a_server_without_sessions_is_refused():
    with pytest.raises(ValueError, match="at least one session"):
        make_server([], "127.0.0.1", 0)
