"""The arena report on synthetic rows: files, a hand-checked Pareto front, paired differences, decision rates."""

from __future__ import annotations

import json

import pytest

from experiments.reports.summary import decision_rates, pareto_front, summarize, write_report


def rows(em_pattern, calls, seconds=1.0, trace=(), tokens=100, prefix="q"):
    out = []
    for i, em in enumerate(em_pattern):
        out.append(
            {
                "id": f"{prefix}{i}",
                "question": f"question {i}",
                "type": "bridge" if i % 2 else "comparison",
                "gold": "g",
                "answer": "g" if em else "x",
                "em": float(em),
                "f1": float(em),
                "recall": 1.0,
                "precision": 0.5,
                "all_gold": 1.0,
                "retries": 0,
                "stop_reason": "done",
                "lm_calls": calls,
                "prompt_tokens": tokens,
                "completion_tokens": 10,
                "lm_seconds": 0.1,
                "seconds": seconds,
                "cached_calls": 0,
                "cost_by_role": {},
                "critic_points": [],
                "passage_ids": [],
                "trace": list(trace),
                "error": None,
            }
        )
    return out


def test_pareto_front_hand_case():
    points = {
        "cheap_bad": (1, 0.2),
        "mid": (3, 0.5),
        "dominated": (4, 0.4),
        "tie_cost_worse": (3, 0.45),
        "expensive_best": (9, 0.7),
        "same_as_mid": (3, 0.5),
        "costly_equal": (10, 0.7),
    }
    assert pareto_front(points) == ["cheap_bad", "mid", "same_as_mid", "expensive_best"]
    assert pareto_front({"only": (5, 0.1)}) == ["only"]


def test_decision_rates_read_trace_keys_and_count_defaults():
    trace = [
        {"role": "crag", "grade": "correct"},
        {"role": "router", "route": "multi_step", "problem": None},
        {"role": "router", "route": "multi_step", "problem": "unparseable"},
        {"role": "critic", "verdict": "insufficient", "critic_problem": None, "action": "stop"},
        {"role": "relevance_grader", "relevant": True},
        {"role": "relevance_grader", "relevant": False},
        {"role": "retriever", "k": 3},
    ]
    rates = decision_rates([{"trace": trace}, {"trace": trace[:1] + [{"role": "crag", "grade": "incorrect"}]}])
    assert rates["crag.grade"] == {"correct": 2 / 3, "incorrect": 1 / 3}
    assert rates["router.route"] == {"(default)": 0.5, "multi_step": 0.5}
    assert rates["relevance_grader.relevant"] == {"False": 0.5, "True": 0.5}
    assert rates["critic.verdict"] == {"insufficient": 1.0}
    assert rates["critic.action"] == {"stop": 1.0}  # it said insufficient, yet P(sufficient) stopped the loop


def test_paired_differences_against_the_baseline():
    base = rows([1, 0, 0, 1, 0, 0, 1, 0], calls=1)
    better = rows([1, 1, 0, 1, 1, 0, 1, 1], calls=4)
    s = summarize({"vanilla": base, "sharp": better}, "vanilla")
    p = s["systems"]["sharp"]["paired"]["em"]
    assert p["diff"] == pytest.approx(3 / 8) and p["ci"][0] <= 3 / 8 <= p["ci"][1] and p["n"] == 8
    assert s["systems"]["vanilla"]["paired"] == {}
    assert s["pareto"]["lm_calls_per_q"] == ["vanilla", "sharp"]


def test_write_report_files_and_table(tmp_path):
    trace = [{"role": "crag", "grade": "ambiguous"}, {"role": "router", "route": "single_step"}]
    data = {
        "vanilla": rows([1, 0, 0, 1], calls=1, seconds=1.0),
        "crag": rows([1, 1, 0, 1], calls=5, seconds=3.0, trace=trace),
        "closed-book": rows([0, 0, 0, 1], calls=1, seconds=0.5),
        "slow-bad": rows([0, 0, 0, 0], calls=9, seconds=9.0),
    }
    data["crag"][0]["judge_accuracy"], data["crag"][0]["judge_faithfulness"] = 0.75, 1.0
    md, summary = write_report(tmp_path / "r", data, baseline="vanilla", title="Test arena")
    folder = tmp_path / "r"
    for name in ("summary.md", "summary.json", "scores.png", "pareto.png", "by_type.png", "decisions.png"):
        assert (folder / name).stat().st_size > 0, name
    text = md.read_text()
    assert "ΔEM vs vanilla" in text and "ΔF1 vs vanilla" in text
    crag_line = next(line for line in text.splitlines() if line.startswith("| crag "))
    assert "+0.250 [" in crag_line and "0.750" in crag_line  # paired diff and judge accuracy
    assert "slow-bad" not in summary["pareto"]["lm_calls_per_q"]
    assert summary["pareto"]["seconds_per_q"] == ["closed-book", "vanilla", "crag"]
    assert "crag.grade: ambiguous 100%" in text and "## By question type" in text
    assert json.loads((folder / "summary.json").read_text())["baseline"] == "vanilla"


def test_report_without_baseline_or_graders(tmp_path):
    md, summary = write_report(tmp_path, {"sharp": rows([1, 0], calls=3)}, baseline="vanilla")
    assert summary["baseline"] is None and "no grader steps" in md.read_text()
    assert (tmp_path / "decisions.png").exists()


def step(kind, calls, cached=0, prompt=0, completion=0, seconds=0.0):
    return {
        "role": kind,
        "lm_calls": calls,
        "cached_calls": cached,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "seconds": seconds,
    }


def test_cached_calls_are_costed_at_their_steps_uncached_mean_and_unknown_without_one(tmp_path):
    # vanilla: 3 uncached questions (1 generator call: 1000 + 10 tokens, 9.5 s of a 10 s question), one cached
    warm = rows([1, 0, 1, 0], calls=1, seconds=10.0, tokens=1000)
    for r in warm:
        r["trace"] = [{"role": "retriever"}, step("generator", 1, 0, 1000, 10, 9.5)]
    warm[0].update(cached_calls=1, seconds=0.01, prompt_tokens=0, completion_tokens=0, trace=[step("generator", 1, 1)])
    # mixed: the planner call is cached on question 0 and uncached (200 tokens, 4 s) on question 1
    mixed = rows([1, 0], calls=2, seconds=0.0, tokens=0)
    mixed[0].update(
        cached_calls=1,
        seconds=6.0,
        prompt_tokens=300,
        completion_tokens=0,
        trace=[step("planner", 1, 1), step("generator", 1, 0, 300, 0, 6.0)],
    )
    mixed[1].update(
        seconds=10.0,
        prompt_tokens=500,
        completion_tokens=0,
        trace=[step("planner", 1, 0, 200, 0, 4.0), step("generator", 1, 0, 300, 0, 6.0)],
    )
    replayed = rows([1, 1, 1, 0], calls=3, seconds=0.02, tokens=0)
    for r in replayed:
        r.update(cached_calls=3, trace=[step("critic", 3, 3)])
    # borrow: its planner call is always a cache hit (another system made it): costed from mixed's planner
    borrow = rows([1], calls=2, seconds=6.0, tokens=300)
    borrow[0].update(
        cached_calls=1, completion_tokens=0, trace=[step("planner", 1, 1), step("generator", 1, 0, 300, 0, 6.0)]
    )
    md, s = write_report(
        tmp_path / "r", {"vanilla": warm, "mixed": mixed, "sharp": replayed, "borrow": borrow}, baseline="vanilla"
    )
    v, mx, sh, b = (s["systems"][n]["metrics"] for n in ("vanilla", "mixed", "sharp", "borrow"))
    assert b["seconds_per_q"] == pytest.approx(10.0) and b["tokens_per_q"] == pytest.approx(500)
    # the cached question costs what the 3 uncached ones did on average: every question counts
    assert v["seconds_per_q"] == pytest.approx((0.01 + 9.5 + 3 * 10.0) / 4) and v["tokens_per_q"] == pytest.approx(1010)
    assert v["cold_n"] == 3 and v["cold_seconds_per_q"] == pytest.approx(10.0) and v["imputed_share"] == 0.25
    assert mx["seconds_per_q"] == pytest.approx(10.0) and mx["prompt_tokens_per_q"] == pytest.approx(500)
    assert mx["cold_n"] == 1 and mx["imputed_share"] == 0.25
    assert sh["tokens_per_q"] is None and sh["seconds_per_q"] is None and sh["imputed_share"] is None
    assert sh["lm_calls_per_q"] == 3  # calls are counted, cached or not
    assert "vanilla" in s["pareto"]["seconds_per_q"] and "sharp" not in s["pareto"]["seconds_per_q"]
    assert s["pareto"]["lm_calls_per_q"] == ["vanilla", "borrow"]  # sharp (calls known) is weighed, and dominated
    text = md.read_text()
    assert "costed at the mean" in text
    sharp_line = next(line for line in text.splitlines() if line.startswith("| sharp "))
    assert "| - | - | - | 0 |" in sharp_line
    assert "| 25% | 0 |" in next(line for line in text.splitlines() if line.startswith("| vanilla "))


def test_a_partial_system_stands_on_the_fronts_at_the_baselines_f1_plus_its_paired_difference(tmp_path):
    base = rows([1, 0, 0, 0], calls=1)  # F1 0.25 over 4 questions
    lucky = rows([1, 0], calls=2)  # F1 0.5 on the two questions it answered, as plain RAG did
    s = summarize({"vanilla": base, "lucky": lucky}, baseline="vanilla")
    m = s["systems"]["lucky"]["metrics"]
    assert m["f1"] == 0.5 and m["front_f1"] == pytest.approx(0.25)
    assert s["pareto"]["lm_calls_per_q"] == ["vanilla"]  # by its raw F1 it would have dominated the front


def test_critic_calibration_table_for_systems_with_critiques(tmp_path):
    def point(p, label, stop):
        return {
            "p_sufficient": p,
            "source": "token",
            "verdict": "sufficient" if stop else "insufficient",
            "label": label,
            "action": "stop" if stop else "retry",
            "stop_call": stop,
            "problem": None,
        }

    sharp = rows([1, 0], calls=3)
    # 4 critiques: 2 complete (one stopped, one sent back: over-trigger 50%), 2 incomplete (both sent back)
    sharp[0]["critic_points"] = [point(0.9, True, True), point(0.2, False, False)]
    sharp[1]["critic_points"] = [point(0.4, True, False), point(0.1, False, False)]
    md, summary = write_report(tmp_path, {"vanilla": rows([1, 0], calls=1), "sharp": sharp}, baseline="vanilla")
    text = md.read_text()
    line = next(x for x in text.splitlines() if x.startswith("| sharp | 4 |"))
    assert "| 75% |" in line and "| 50% | 0% | 75% |" in line  # right calls; over / under-trigger; sent to a repair
    assert "## Critic calibration" in text and not any(x.startswith("| vanilla | 0 |") for x in text.splitlines())
    assert summary["systems"]["sharp"]["metrics"]["critic_brier"] == pytest.approx((0.01 + 0.04 + 0.36 + 0.01) / 4)


def test_a_step_only_ever_answered_from_the_cache_is_costed_from_the_system_that_makes_the_same_call(tmp_path):
    # CRAG's evaluator calls were all cache hits, made uncached by the LM reranker (same ScoreRelevance call)
    rerank = rows([1, 0], calls=2, seconds=8.0, tokens=600)
    for r in rerank:
        r["trace"] = [step("lm_reranker", 1, 0, 300, 5, 3.0), step("generator", 1, 0, 300, 5, 5.0)]
    crag = rows([1, 1], calls=3, seconds=5.0, tokens=300)
    for r in crag:
        r.update(
            cached_calls=2,
            completion_tokens=5,
            trace=[
                step("retrieval_evaluator", 1, 1),
                step("retrieval_evaluator", 1, 1),
                step("generator", 1, 0, 300, 5, 5.0),
            ],
        )
    s = summarize({"vanilla-lmrerank": rerank, "crag": crag}, baseline=None)
    c = s["systems"]["crag"]["metrics"]
    assert c["seconds_per_q"] == pytest.approx(5.0 + 2 * 3.0) and c["prompt_tokens_per_q"] == pytest.approx(
        300 + 2 * 300
    )
    assert c["imputed_share"] == pytest.approx(4 / 6)
    alone = summarize({"crag": crag}, baseline=None)["systems"]["crag"]["metrics"]
    assert alone["seconds_per_q"] is None  # no uncached twin anywhere: unknown, not free


def test_the_same_call_twins_do_run_the_same_signature():
    import inspect
    import re

    from optimize.evaluate import SAME_CALL
    from program.systems import crag, rerank

    # every role named in SAME_CALL: its predictor, and the call site that names the trace step
    predictors = {
        "retrieval_evaluator": (crag.CorrectiveRAG(None).evaluator, crag, "self.evaluator"),
        "lm_reranker": (rerank.LMRerankRAG(None).scorer, rerank, "self.scorer"),
    }
    assert SAME_CALL and set(SAME_CALL) | set(SAME_CALL.values()) <= set(predictors), SAME_CALL
    for kind, twin in SAME_CALL.items():
        (mine, module, attr), (theirs, _, _) = predictors[kind], predictors[twin]
        assert mine.signature.__name__ == theirs.signature.__name__, (kind, twin)
        assert re.search(rf'"{kind}",\s*{re.escape(attr)}\b', inspect.getsource(module)), (kind, attr)


def test_compact_rows_are_costed_from_their_cost_by_role(tmp_path):
    """A report rebuilt from committed compact rows (no trace) imputes cached calls per role."""
    from optimize.evaluate import compact_row

    full = rows([1, 0, 1], calls=2, seconds=10.0, tokens=500)
    for r in full:
        r["trace"] = [step("critic", 1, 0, 300, 0, 4.0), step("generator", 1, 0, 200, 0, 6.0)]
        r["cost_by_role"] = {
            "critic": {
                "lm_calls": 1,
                "prompt_tokens": 300,
                "completion_tokens": 0,
                "lm_seconds": 4.0,
                "cached_calls": 0,
            },
            "generator": {
                "lm_calls": 1,
                "prompt_tokens": 200,
                "completion_tokens": 0,
                "lm_seconds": 6.0,
                "cached_calls": 0,
            },
        }
    # question 0's critic call came from the cache: 0 tokens, ~0 s for it
    full[0].update(cached_calls=1, seconds=6.0, prompt_tokens=200, trace=[step("critic", 1, 1), full[0]["trace"][1]])
    full[0]["cost_by_role"]["critic"] = {
        "lm_calls": 1,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "lm_seconds": 0.0,
        "cached_calls": 1,
    }
    compact = [compact_row(r) for r in full]
    assert all("trace" not in r for r in compact)
    _, with_traces = write_report(tmp_path / "a", {"sharp": full}, baseline=None)
    _, from_compact = write_report(tmp_path / "b", {"sharp": compact}, baseline=None)
    a, b = (s["systems"]["sharp"]["metrics"] for s in (with_traces, from_compact))
    assert b["seconds_per_q"] == pytest.approx(10.0) and b["prompt_tokens_per_q"] == pytest.approx(500)
    assert (b["seconds_per_q"], b["tokens_per_q"], b["imputed_share"]) == (
        a["seconds_per_q"],
        a["tokens_per_q"],
        a["imputed_share"],
    )
