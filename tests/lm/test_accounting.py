"""Every call through build_lm/SharpLM is recorded: role, tokens, seconds, cache hits, reuse."""

from __future__ import annotations

import copy

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError
from lm_doubles import ScriptedEngine

from program.lm import (
    LMConfig,
    LMSpec,
    SharpLM,
    assign_lms,
    build_lm,
    recording,
    summarize,
)
from program.lm.cache import cold_cache


def scripted(role: str, answer: str = "[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]", **kw) -> SharpLM:
    return SharpLM(LMSpec(model="openai/scripted"), role, engine=ScriptedEngine(lambda _: answer, **kw))


def test_each_call_is_recorded_with_its_role_and_usage():
    lm = scripted("generator", prompt_tokens=40, completion_tokens=4, reused=30)
    qa = dspy.Predict("question -> answer")
    with recording() as ledger:
        assert qa(question="Capital of France?", lm=lm).answer == "Paris"
    (rec,) = ledger.records
    assert (rec.role, rec.model, rec.prompt_tokens, rec.completion_tokens) == ("generator", "openai/scripted", 40, 4)
    assert rec.reused_prompt_tokens == 30 and rec.cached is False and rec.error is None and rec.seconds >= 0


def test_sums_per_role_through_a_program():
    class Two(dspy.Module):
        def __init__(self):
            super().__init__()
            self.planner = dspy.Predict("question -> plan")
            self.generator = dspy.Predict("question, plan -> answer")

        def forward(self, question):
            plan = self.planner(question=question).plan
            return self.generator(question=question, plan=plan)

    prog = Two()
    prog.planner.lm = scripted(
        "planner", "[[ ## plan ## ]]\nlook it up\n\n[[ ## completed ## ]]", prompt_tokens=100, completion_tokens=10
    )
    prog.generator.lm = scripted("generator", prompt_tokens=200, completion_tokens=20)
    with recording() as outer:
        for q in ("q1?", "q2?", "q3?"):
            with recording() as inner:
                prog(question=q)
            assert inner.summary()["lm_calls"] == 2
    s = outer.summary()
    assert s["lm_calls"] == 6 and s["prompt_tokens"] == 900 and s["completion_tokens"] == 90
    assert s["by_role"]["planner"]["prompt_tokens"] == 300 and s["by_role"]["generator"]["lm_calls"] == 3
    assert summarize([r.to_dict() for r in outer.records]) == s


def test_cache_hits_are_flagged_and_cost_nothing():
    lm = scripted("critic")
    qa = dspy.Predict("question -> answer")
    with recording() as ledger:
        qa(question="same?", lm=lm)
        qa(question="same?", lm=lm)
    first, second = ledger.records
    assert not first.cached and first.prompt_tokens == 50
    assert second.cached and second.prompt_tokens == 0 and second.completion_tokens == 0
    assert len(lm.engine.requests) == 1
    assert ledger.summary()["cached_calls"] == 1


def test_cache_off_per_spec_and_cold_cache():
    engine = ScriptedEngine(lambda _: "[[ ## answer ## ]]\nx\n\n[[ ## completed ## ]]")
    lm = SharpLM(LMSpec(model="openai/scripted", cache=False), "generator", engine=engine)
    qa = dspy.Predict("question -> answer")
    with recording() as ledger:
        qa(question="again?", lm=lm)
        qa(question="again?", lm=lm)
    assert [r.cached for r in ledger.records] == [False, False] and len(engine.requests) == 2

    cached = SharpLM(LMSpec(model="openai/scripted"), "generator", engine=engine)
    qa(question="warm?", lm=cached)
    with cold_cache(disk=False), recording() as ledger:
        qa(question="warm?", lm=cached)  # an empty cache: the engine is asked again
    assert [r.cached for r in ledger.records] == [False]
    with recording() as ledger:
        qa(question="warm?", lm=cached)  # the previous cache is back
    assert [r.cached for r in ledger.records] == [True]


def test_lm_kwargs_reach_the_engine():
    lm = SharpLM(
        LMSpec(model="openai/scripted", temperature=0.3, max_tokens=77),
        "judge",
        engine=ScriptedEngine(lambda _: "[[ ## answer ## ]]\nx\n\n[[ ## completed ## ]]"),
    )
    dspy.Predict("question -> answer")(question="?", lm=lm)
    cfg = lm.engine.requests[0].config
    assert (cfg.temperature, cfg.max_tokens) == (0.3, 77)


def test_json_adapter_sends_a_schema_to_a_schema_capable_engine():
    lm = scripted("critic", '{"verdict": "sufficient", "confidence": 0.9}')
    sig = dspy.Signature("evidence -> verdict: str, confidence: float")
    with dspy.context(adapter=dspy.JSONAdapter()):
        out = dspy.Predict(sig)(evidence="...", lm=lm)
    assert out.verdict == "sufficient" and out.confidence == 0.9
    fmt = lm.engine.requests[0].config.response_format
    assert fmt["type"] == "json_schema" and set(fmt["schema"]["properties"]) == {"verdict", "confidence"}


def test_deepcopy_shares_the_engine_and_saved_state_has_no_secrets(monkeypatch):
    monkeypatch.setenv("SOME_KEY", "sk-secret-abcdef123456")
    lm = SharpLM(
        LMSpec(model="openai/scripted", api_key_env="SOME_KEY"), "planner", engine=ScriptedEngine(lambda _: "x")
    )
    prog = dspy.Predict("question -> answer")
    prog.lm = lm
    clone = copy.deepcopy(prog)
    assert clone.lm is not lm and clone.lm.engine is lm.engine and clone.lm.role == "planner"
    state = prog.dump_state()["lm"]
    assert state["spec"]["api_key_env"] == "SOME_KEY" and "sk-secret" not in repr(state)


def test_assign_lms_records_roles_of_a_whole_config(fake_openai):
    prog = dspy.ChainOfThought("question -> answer")
    cfg = LMConfig.from_mapping({"default": {"model": "openai/m", "api_base": fake_openai.base}})
    roles = assign_lms(prog, cfg)
    assert roles == {"predict": "generator"}
    with recording() as ledger, pytest.raises(AdapterParseError):  # the fake reply lacks DSPy's fields
        prog(question="hi?")
    assert ledger.records and {r.role for r in ledger.records} == {"generator"}
    assert all(r.prompt_tokens == 11 for r in ledger.records)


def test_async_calls_are_recorded_too(fake_openai):
    import asyncio

    lm = build_lm(LMSpec(model="openai/m", api_base=fake_openai.base, cache=False), "proposer")

    async def go():
        with recording() as ledger:
            out = await lm.acall("hi")
        return out, ledger.records

    out, records = asyncio.run(go())
    assert out == ["reply 1"]
    assert [(r.role, r.prompt_tokens, r.completion_tokens) for r in records] == [("proposer", 11, 3)]


def test_project_errors_raised_inside_an_engine_pass_through():
    from program.errors import ModelFileError

    class Broken:
        def complete(self, request):
            raise ModelFileError("local/x needs pip install 'x==1'")

        def close(self):
            pass

    lm = SharpLM(LMSpec(model="openai/scripted", cache=False), "planner", engine=Broken())
    with recording() as ledger, pytest.raises(ModelFileError, match="pip install"):
        lm("hi")
    assert ledger.records[0].error.startswith("ModelFileError")
