"""SHARP's control flow with scripted LMs: which branch ran, how many retries, which k."""

from __future__ import annotations

import pytest
from doubles import GarbageLM, KeywordRetriever, ScriptedLM, assign

from program.errors import ConfigError, QuestionError
from program.sharp import SharpConfig, SharpRAG

Q = "What nationality is the director of the film that won the Palme d'Or in 1994?"


def crit(verdict="sufficient", confidence=0.9, missing=(), suggested=()):
    return {
        "verdict": verdict,
        "confidence": confidence,
        "missing_information": list(missing),
        "suggested_queries": list(suggested),
    }


def run(critic_answers, config=None, plan=("Palme d'Or 1994 film",), answer="American", retriever=None):
    retriever = retriever or KeywordRetriever()
    prog = SharpRAG(retriever, config or SharpConfig())
    lms = {
        "planner": ScriptedLM("planner", [{"sub_queries": list(plan)}]),
        "critic": ScriptedLM("critic", list(critic_answers)),
        "generator": ScriptedLM("generator", [{"answer": answer, "supporting_passages": [1]}]),
    }
    assign(prog, lms)
    return prog(question=Q), lms, retriever


def test_sufficient_first_round_stops_without_retry():
    pred, lms, retriever = run([crit()])
    assert pred.stop_reason == "sufficient"
    assert pred.retries == 0
    assert [lm.calls for lm in lms.values()] == [1, 1, 1]
    assert {k for _, k in retriever.queries} == {3}
    assert pred.cost["lm_calls"] == 3 and set(pred.cost["by_role"]) == {"planner", "critic", "generator"}
    assert pred.answer == "American"
    assert pred.cited_ids == [pred.passages[0].id]


def test_insufficient_retries_with_suggested_query_at_next_k():
    pred, lms, retriever = run(
        [
            crit("insufficient", 0.8, ["nationality of the director"], ["Quentin Tarantino nationality"]),
            crit("sufficient", 0.95),
        ]
    )
    assert pred.retries == 1 and pred.stop_reason == "sufficient"
    assert ("Quentin Tarantino nationality", 5) in retriever.queries
    critic_steps = [s for s in pred.trace if s["role"] == "critic"]
    assert [s["action"] for s in critic_steps] == ["retry", "stop"]
    assert [s["critic_stop"] for s in critic_steps] == [False, True]  # the critic's own call, recorded
    assert "p2" in {p.id for p in pred.passages}


def test_low_confidence_sufficient_is_below_threshold_and_retries():
    pred, _, _ = run(
        [crit("sufficient", 0.4, suggested=["Quentin Tarantino"]), crit("sufficient", 0.9)],
        config=SharpConfig(confidence_threshold=0.7),
    )
    assert pred.retries == 1


def test_retry_cap_and_widening_k_schedule():
    names = ("Kieslowski", "Zanussi", "Wajda", "Polanski", "Holland")
    answers = [crit("insufficient", 0.9, suggested=[f"query {name} Polish"]) for name in names]
    pred, lms, retriever = run(answers, config=SharpConfig(max_retries=2, k_schedule=(3, 5, 7)))
    assert pred.retries == 2 and pred.stop_reason == "max_retries"
    assert lms["critic"].calls == 3
    last = [s for s in pred.trace if s["role"] == "critic"][-1]
    assert last["action"] == "stop" and last["critic_stop"] is False  # the loop stopped, the critic did not
    ks = [k for q, k in retriever.queries if q.startswith("query ")]
    assert ks == [5, 7]


def test_repeated_suggestion_stops_the_loop():
    pred, lms, _ = run([crit("insufficient", 0.9, suggested=["Palme d'Or 1994 film"])])
    assert pred.stop_reason == "no_new_queries" and pred.retries == 0
    assert lms["critic"].calls == 1


def test_no_new_passages_stops_the_loop():
    tiny = KeywordRetriever(KeywordRetriever().passages[:2])
    pred, _, _ = run(
        [crit("insufficient", 0.9, suggested=["something else entirely"])],
        retriever=tiny,
        config=SharpConfig(k_schedule=(2, 2, 2), evidence_cap=4),
    )
    assert pred.stop_reason == "no_new_passages" and pred.retries == 1


def test_budget_on_lm_calls_stops_before_critique():
    cfg = SharpConfig(budget={"max_lm_calls": 1})
    pred, lms, _ = run([crit()], config=cfg)
    assert pred.stop_reason == "budget_lm_calls"
    assert lms["critic"].calls == 0 and lms["generator"].calls == 1
    assert pred.answer == "American"


def test_inconsistent_critic_is_low_confidence_insufficient():
    pred, _, _ = run([crit("sufficient", 250.0)])
    step = next(s for s in pred.trace if s["role"] == "critic")
    assert step["verdict"] == "insufficient" and step["confidence"] == 0.0
    assert step["p_sufficient"] == 0.5 and step["confidence_source"] == "fallback"  # unknown, not 1 - 0.0
    assert step["critic_problem"].startswith("invalid fields")
    pred, _, _ = run([crit("sufficient", 0.9, ["birthplace"], ["Tarantino birthplace"]), crit()])
    first = next(s for s in pred.trace if s["role"] == "critic")
    assert first["critic_problem"].startswith("inconsistent") and pred.retries == 1


def test_percentage_confidence_is_read_as_probability():
    pred, _, _ = run([crit("sufficient", 85)])
    assert next(s for s in pred.trace if s["role"] == "critic")["confidence"] == 0.85
    assert pred.retries == 0


def test_garbage_from_every_role_still_answers_with_a_trace(retriever):
    prog = SharpRAG(retriever)
    g = GarbageLM()
    assign(prog, {"planner": g, "critic": g, "generator": g})
    pred = prog(question="Is Paris the capital of France?")
    assert pred.answer == "unknown"
    roles = [s["role"] for s in pred.trace]
    assert roles[0] == "planner" and roles[-1] == "generator" and "critic" in roles
    assert all(s["error"] for s in pred.trace if s["role"] in ("planner", "critic", "generator"))
    assert pred.retries <= prog.config.max_retries


@pytest.mark.parametrize("question", ["", "   \n\t"])
def test_empty_question_is_a_clear_error(retriever, question):
    with pytest.raises(QuestionError, match="empty question"):
        SharpRAG(retriever)(question=question)


def test_very_long_question_is_truncated_and_noted():
    prog_q = "Palme d'Or " * 1000  # 11,000 characters
    retriever = KeywordRetriever()
    prog = SharpRAG(retriever)
    assign(
        prog,
        {
            "planner": ScriptedLM("planner", [{"sub_queries": []}]),
            "critic": ScriptedLM("critic", [crit()]),
            "generator": ScriptedLM("generator", [{"answer": "x", "supporting_passages": []}]),
        },
    )
    pred = prog(question=prog_q)
    assert pred.trace[0]["role"] == "input" and "truncated" in pred.trace[0]["note"]
    assert all(len(q) <= 2000 for q, _ in retriever.queries)


def test_config_rejects_unknown_keys_and_bad_schedules():
    with pytest.raises(ConfigError, match="unknown key 'treshold'"):
        SharpConfig.from_mapping({"treshold": 0.5})
    with pytest.raises(ConfigError, match="k_schedule"):
        SharpConfig.from_mapping({"k_schedule": [5, 3]})
    with pytest.raises(ConfigError, match="confidence_threshold"):
        SharpConfig.from_mapping({"confidence_threshold": 1.5})
    assert SharpConfig.from_mapping({"k_schedule": [2, 4]}).k_for_round(5) == 4


def test_state_round_trip_keeps_demos_and_instructions(tmp_path, retriever):
    import dspy

    prog = SharpRAG(retriever)
    prog.critic.signature = prog.critic.signature.with_instructions("Be strict.")
    prog.generator.demos = [dspy.Example(question="q", evidence="e", answer="a", supporting_passages=[1])]
    path = tmp_path / "state.json"
    prog.save(str(path))
    other = SharpRAG(retriever)
    other.load(str(path))
    assert other.critic.signature.instructions == "Be strict."
    assert other.generator.demos[0]["answer"] == "a"


def test_cut_json_from_a_looping_critic_is_salvaged(retriever):
    """A critic that loops in its list until max_tokens cuts it: the fields before the cut still count."""
    import dspy

    prog = SharpRAG(retriever, SharpConfig(max_retries=1))
    cut = '{"verdict": "insufficient", "confidence": 0.8, "suggested_queries": ["Quentin Tarantino", "Quentin Tar'

    class Cut(ScriptedLM):
        def forward(self, prompt=None, messages=None, **kwargs):
            if self.calls == 0:
                self.calls += 1
                raise dspy.utils.exceptions.AdapterParseError(
                    adapter_name="JSONAdapter", signature=prog.critic.signature, lm_response=cut
                )
            return super().forward(prompt=prompt, messages=messages, **kwargs)

    critic = Cut("critic", [crit(), crit()])
    assign(
        prog,
        {
            "planner": ScriptedLM("planner", [{"sub_queries": ["Palme d'Or 1994"]}]),
            "critic": critic,
            "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        },
    )
    pred = prog(question=Q)
    first = next(s for s in pred.trace if s["role"] == "critic")
    assert first["salvaged"] and first["verdict"] == "insufficient" and first["confidence"] == 0.8
    assert first["suggested_queries"] == ["Quentin Tarantino", "Quentin Tar"]
    assert pred.retries == 1


def test_looping_planner_is_capped_and_its_cut_json_salvaged(retriever):
    """Measured: the 1.5B planner once repeated one query until the 1024-token default (110 s).
    The planner now runs under planner_max_tokens and the queries before the cut are kept."""
    import dspy

    prog = SharpRAG(retriever, SharpConfig(max_retries=0, planner_max_tokens=48))
    cut = '{"sub_queries": ["Palme d\'Or 1994 winner", "Palme d\'Or 1994 winner", "Palme d\'Or 19'
    seen: list[dict] = []

    class Looping(ScriptedLM):
        def forward(self, prompt=None, messages=None, **kwargs):
            seen.append(kwargs)
            self.calls += 1
            raise dspy.utils.exceptions.AdapterParseError(
                adapter_name="JSONAdapter", signature=prog.planner.signature, lm_response=cut
            )

    assign(
        prog,
        {
            "planner": Looping("planner", []),
            "critic": ScriptedLM("critic", [crit()]),
            "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
        },
    )
    pred = prog(question=Q)
    plan = next(s for s in pred.trace if s["role"] == "planner")
    assert seen and all(kw.get("max_tokens") == 48 for kw in seen)
    assert plan["salvaged"] and plan["sub_queries"] == ["Palme d'Or 1994 winner"]  # the cut copy is dropped
    assert pred.queries == [Q, "Palme d'Or 1994 winner"]


# ---- confidence from the critic's token probabilities -----------------------------------------
def run_token_critic(replies, config=None):
    from doubles import logprob_lm

    critic, engine = logprob_lm(replies)
    prog = SharpRAG(KeywordRetriever(), config or SharpConfig())
    lms = {
        "planner": ScriptedLM("planner", [{"sub_queries": ["Palme d'Or 1994 film"]}]),
        "critic": critic,
        "generator": ScriptedLM("generator", [{"answer": "American", "supporting_passages": [1]}]),
    }
    assign(prog, lms)
    return prog(question=Q), engine


def critiques(pred):
    return [s for s in pred.trace if s["role"] == "critic"]


def test_token_probability_of_sufficient_stops_even_against_the_written_verdict():
    # the model writes "insufficient, 0.0" but puts 80% of its mass on "sufficient"
    pred, engine = run_token_critic(
        [(crit("insufficient", 0.0, suggested=["Tarantino"]), {"sufficient": 0.8, "insufficient": 0.2})]
    )
    (c,) = critiques(pred)
    assert pred.stop_reason == "sufficient" and pred.retries == 0
    assert c["confidence_source"] == "token" and c["p_sufficient"] == pytest.approx(0.8)
    assert c["confidence"] == pytest.approx(0.2)  # the probability of the verdict it wrote
    assert engine.requests[0].logprobs is not None


def test_token_probability_below_the_threshold_retries_until_it_is_reached():
    pred, _ = run_token_critic(
        [
            (
                crit("insufficient", 0.0, suggested=["Quentin Tarantino nationality"]),
                {"sufficient": 0.6, "insufficient": 0.4},
            ),
            (crit("sufficient", 0.9), {"sufficient": 0.95, "insufficient": 0.05}),
        ],
        SharpConfig(confidence_threshold=0.7),
    )
    first, second = critiques(pred)
    assert (first["p_sufficient"], first["action"]) == (pytest.approx(0.6), "retry")
    assert (second["p_sufficient"], second["action"]) == (pytest.approx(0.95), "stop")
    assert pred.stop_reason == "sufficient" and pred.retries == 1


def test_written_sufficient_below_the_threshold_in_probability_does_not_stop_as_sufficient():
    # "sufficient, 0.9" in words but 0.6 in probability, and no query to retry with
    pred, _ = run_token_critic(
        [(crit("sufficient", 0.9), {"sufficient": 0.6, "insufficient": 0.4})], SharpConfig(confidence_threshold=0.7)
    )
    assert pred.stop_reason == "no_new_queries" and pred.retries == 0


def test_verbal_mode_does_not_ask_for_logprobs_and_uses_the_written_confidence():
    pred, engine = run_token_critic(
        [
            (crit("insufficient", 0.0, suggested=["Tarantino"]), {"sufficient": 0.8, "insufficient": 0.2}),
            (crit("sufficient", 0.9), {"sufficient": 0.9, "insufficient": 0.1}),
        ],
        SharpConfig(critic_confidence="verbal"),
    )
    first, second = critiques(pred)
    assert engine.requests[0].logprobs is None
    assert first["confidence_source"] == "verbal" and first["action"] == "retry"
    assert pred.stop_reason == "sufficient" and pred.retries == 1


def test_an_lm_without_logprobs_falls_back_to_the_written_confidence():
    pred, _, _ = run([crit("sufficient", 0.9)])  # DummyLM returns no logprobs
    (c,) = critiques(pred)
    assert c["confidence_source"] == "verbal" and c["p_sufficient"] == pytest.approx(0.9)


def test_repeated_suggestions_fall_back_to_the_missing_facts():
    pred, _, retriever = run(
        [
            crit("insufficient", 0.9, missing=["Kieslowski nationality"], suggested=["Palme d'Or 1994 film"]),
            crit("sufficient", 0.95),
        ]
    )
    assert pred.retries == 1 and ("Kieslowski nationality", 5) in retriever.queries
