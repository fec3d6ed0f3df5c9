"""Progress of the long steps, from a fake clock: done / total, elapsed, ETA, running EM; the lines shown
where there is no terminal; the evaluation wrappers that count questions; the step lines of `sharp ask`."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from experiments.console.progress import Tally, counter, showing, watched
from experiments.console.terminal import duration


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += seconds


def test_duration():
    assert [duration(s) for s in (0, 44.6, 60, 185, 3600, 3725)] == ["0s", "45s", "1m00s", "3m05s", "1h00m", "1h02m"]
    assert duration(None) == "?"


def test_tally_counts_done_total_eta_and_em_from_the_clock():
    clock = FakeClock()
    t = Tally(5, clock=clock, score_name="EM")
    assert (t.done, t.remaining, t.eta, t.score) == (0, 5, None, None)
    assert t.status() == "0s elapsed, ETA after the first question"
    clock.tick(30)
    t.advance(score=1.0)
    assert t.elapsed == 30 and t.seconds_per_item == 30 and t.eta == 4 * 30 and t.score == 1.0
    clock.tick(50)
    t.advance(score=0.0)
    assert t.seconds_per_item == 40 and t.eta == 3 * 40 and t.score == 0.5
    assert t.line("SHARP") == "SHARP: 2/5 questions, 1m20s elapsed, ETA 2m00s, EM 0.500"
    clock.tick(10)
    t.advance(failed=True)  # a failed question counts as done, scores 0, and is said
    assert t.done == 3 and t.failed == 1 and t.score == pytest.approx(1 / 3)
    assert t.status().endswith("1 failed")
    for _ in range(2):
        t.advance(score=1.0)
    assert t.remaining == 0 and t.eta == 0 and "done" in t.status()


def test_a_resumed_run_counts_what_was_done_before_but_times_only_this_run():
    clock = FakeClock()
    t = Tally(10, clock=clock, done=6, score_name="EM", score_sum=3.0, scored=6)
    assert t.line("vanilla").startswith("vanilla: 6/10 questions") and t.eta is None
    clock.tick(20)
    t.advance(score=1.0)
    assert t.done == 7 and t.seconds_per_item == 20 and t.eta == 3 * 20 and t.score == pytest.approx(4 / 7)


def test_a_prior_estimate_is_the_eta_until_the_first_item_and_is_marked():
    clock = FakeClock()
    t = Tally(4, clock=clock, prior_seconds=90.0)
    assert t.eta == 360 and t.eta_is_estimate and "ETA ~6m00s" in t.status()
    clock.tick(100)  # the first one is still running: the estimate counts down
    assert t.eta == 260 and "ETA ~4m20s" in t.status()
    clock.tick(300)
    assert t.eta == 0 and "past the estimate, after the first question" in t.status()
    t.advance()
    assert t.eta == 3 * 400 and not t.eta_is_estimate and "ETA 20m00s" in t.status()


def test_passages_show_a_rate():
    clock = FakeClock()
    t = Tally(22826, "passages", clock=clock)
    clock.tick(10)
    t.advance(640)
    assert t.line("embedding") == "embedding: 640/22826 passages, 10s elapsed, ETA 5m47s, 64 passages/s"


def console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=200, force_terminal=False), buf


def test_without_a_terminal_lines_come_at_most_once_per_interval():
    clock = FakeClock()
    con, buf = console()
    t = Tally(6, clock=clock, score_name="EM")
    with showing("plain RAG", t, live=False, console=con, interval=30, heartbeat=False) as shown:
        for seconds in (10, 10, 10, 10, 10, 10):
            clock.tick(seconds)
            shown.advance(score=1.0)
    lines = buf.getvalue().splitlines()
    assert lines == [
        "plain RAG: 0/6 questions, 0s elapsed, ETA after the first question",
        "plain RAG: 1/6 questions, 10s elapsed, ETA 50s, EM 1.000",  # the first one, at once
        "plain RAG: 4/6 questions, 40s elapsed, ETA 20s, EM 1.000",  # 30 s after the last line
        "plain RAG: 6/6 questions, 1m00s elapsed, done, EM 1.000",  # the end
    ]


def test_disabled_shows_nothing():
    con, buf = console()
    with showing("x", Tally(2), enabled=False, console=con) as shown:
        shown.advance()
    assert buf.getvalue() == ""


def test_the_index_counter_yields_an_advance_callback():
    con, buf = console()
    factory = counter("embedding passages", "passages", live=False, console=con, heartbeat=False)
    with factory(100, 40) as advance:
        advance(60)
    assert buf.getvalue().splitlines()[-1].startswith("embedding passages: 100/100 passages")


def test_watched_counts_each_question_once_with_its_em_or_as_failed():
    clock = FakeClock()
    con, _ = console()
    t = Tally(3, clock=clock, score_name="EM")

    def system(question):
        if question == "bad":
            raise ValueError("the LM is down")
        return question

    with showing("s", t, live=False, console=con, heartbeat=False) as shown:
        call, row = watched(system, lambda ex, pred: {"em": 1.0 if pred == "good" else 0.0}, shown)
        row(None, call(question="good"))
        row(None, call(question="meh"))
        with pytest.raises(ValueError):
            call(question="bad")
    assert (t.done, t.failed, t.score) == (3, 1, pytest.approx(1 / 3))


def test_step_lines():
    from experiments.console.render import step_line

    cost = {"lm_calls": 1, "seconds": 2.5, "prompt_tokens": 300, "completion_tokens": 41}
    plan = {"role": "planner", "round": 1, "sub_questions": ["When was A born?", "When was B born?"], **cost}
    assert step_line(plan) == (
        "[bold]compare[/bold], round 1: When was A born? | When was B born? [dim](2.5 s, 341 tokens)[/dim]"
    )
    assert "(no sub-question: the draft stands)" in step_line({**plan, "sub_questions": []})
    ret = {"role": "retriever", "round": 1, "k": 5, "queries": ["Tarantino"], "retrieved_ids": [["a", "b"]]}
    assert step_line({**ret, "new_ids": ["b"]}).startswith(
        "[bold]retrieve[/bold], round 1, k=5: 1 query -> 2 passages, 1 new"
    )
    crit = {"role": "critic", "round": 0, "verdict": "incomplete", "p_supported": 0.31, **cost}
    line = step_line(crit)
    assert "critic[/bold], round 0: incomplete, P(supported) 0.31 [dim]" in line
    discarded = step_line({**crit, "verdict": None, "p_supported": None, "critic_problem": "unparseable"})
    assert "round 0: -, P(supported) - [yellow](discarded: unparseable)[/yellow]" in discarded
    judged = {"role": "judgement", "round": 1, "action": "retrieve", "p_right": 0.84, "accepted": True}
    assert step_line(judged) == "[bold]judge[/bold], round 1 (retrieve): P(right) 0.84, accepted"
    fell_back = {**judged, "action": "compare", "p_right": None, "accepted": False, "fallback": "no value read"}
    assert step_line(fell_back) == (
        "[bold]judge[/bold], round 1 (compare): P(right) -, not accepted [yellow](no value read)[/yellow]"
    )
    assert step_line({"role": "composer", "round": 1, "answer": "yes"}) == "[bold]compose[/bold], round 1: yes"
    chosen = step_line({"role": "select", "round": 0, "action": "draft", "answer": "American"})
    assert chosen == "[bold]answer[/bold] from round 0 (draft): American"
    answer = step_line({"role": "generator", "answer": "American", "cited_ids": ["a"], **cost})
    assert answer.startswith("[bold]answer[/bold]: American [dim](cites 1 passage)[/dim]")
    failed = step_line({**crit, "error": "AdapterParseError: failed to parse. \n\nLM Response: {"})
    assert "[red]failed: AdapterParseError: failed to parse[/red]" in failed and "\n" not in failed


def test_a_chain_plan_a_form_without_repair_and_the_stop_are_said_as_they_are():
    from experiments.console.render import confidence_line, step_line, stop_text

    plan = {"role": "planner", "round": 1, "by_rule": True, "hops": ["Who directed X?", "Where was #1 born?"]}
    assert step_line(plan) == "[bold]chain[/bold], round 1 (by rule): Who directed X? -> Where was #1 born?"
    refused = step_line({**plan, "by_rule": False, "hops": ["a?"], "refused": "1 hop(s): a chain has 2 to 4"})
    assert "(by the planner): a?" in refused and "refused: 1 hop(s): a chain has 2 to 4: the draft stands" in refused
    unrepaired = {"role": "judgement", "round": 0, "action": "draft", "p_right": 0.2, "accepted": True,
                  "repairable": False}  # fmt: skip
    assert step_line(unrepaired) == "[bold]judge[/bold], round 0 (draft): P(right) 0.20, no repair for this form"
    assert stop_text("no_repair_for_form") == "no repair for this form" and stop_text("max_repairs") == "the repair cap"
    assert stop_text("confident") == "P(right) reached the threshold"
    assert stop_text("budget_lm_calls") == "budget spent: lm calls"
    # the answer panel's P(right): low below the form's threshold, or below 0.5 where the form has no repair
    select = {"role": "select", "p_right": 0.2, "threshold": 0.1, "repairable": False}
    assert confidence_line([select]) == "[yellow]P(right) 0.20: low (below 0.5)[/yellow]"
    assert confidence_line([{**select, "repairable": True}]) == "P(right) 0.20"
    assert confidence_line([{**select, "repairable": True, "threshold": 0.8}]) == (
        "[yellow]P(right) 0.20: low (below the threshold 0.80)[/yellow]"
    )
    assert confidence_line([{"role": "select", "p_right": None}]) is None


def test_a_long_question_gets_a_heartbeat_line_without_a_terminal():
    import time

    clock = FakeClock()
    con, buf = console()
    with showing("SHARP", Tally(3, clock=clock), live=False, console=con, interval=0.02) as shown:
        clock.tick(45)  # the first question takes long: nothing has finished
        deadline = time.monotonic() + 5
        while "(on question 1)" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        shown.advance()
    assert "SHARP: 0/3 questions, 45s elapsed, ETA after the first question (on question 1)" in buf.getvalue()


def test_the_live_bar_shows_the_count_and_status_from_the_tally():
    clock = FakeClock()
    buf = io.StringIO()
    con = Console(file=buf, width=160, force_terminal=True, color_system=None)
    t = Tally(4, clock=clock, score_name="EM")
    with showing("plain RAG (vanilla)", t, live=True, console=con) as shown:
        clock.tick(20)
        shown.advance(score=1.0)
    last = buf.getvalue().replace("\r", "\n").splitlines()[-2:]
    assert any("plain RAG (vanilla)" in ln and "1/4 questions 20s elapsed, ETA 1m00s, EM 1.000" in ln for ln in last)
