"""Study storages and worker processes without a server: masked URLs, a clear error for a database that is not
there, dead-process detection, trials of a dead worker retried, the per-trial sampler, the trial gate."""

from __future__ import annotations

import socket
import subprocess
import sys
import warnings

import optuna
import pytest

from optimize.policy_search import (
    SearchSpace,
    SkippedTrial,
    TrialSeededSampler,
    Tuner,
    enqueue_baseline,
    finished_trials,
    get_objective,
    open_study,
    reap_dead_trials,
    run_study,
    suggest,
)
from optimize.storage import check_database, check_storage, redact_url, scrub
from optimize.workers import identity, is_gone
from program.errors import ConfigError, StoreError

optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_passwords_are_masked_in_urls_and_messages():
    url = "postgresql+psycopg://alice:s3cr3t-pw@db.example:5432/studies"
    assert redact_url(url) == "postgresql+psycopg://alice:***@db.example:5432/studies"
    assert redact_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert redact_url("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert scrub(f"failed for {url} (password s3cr3t-pw)", url) == (
        "failed for postgresql+psycopg://alice:***@db.example:5432/studies (password ***)"
    )
    assert scrub("port 1 refused", "postgresql://u:p@h:1/x") == "port 1 refused"  # a 1-letter password is not hunted


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_database_that_is_not_there_is_a_clear_error_without_the_password():
    url = f"postgresql://sharp:Hunter2-secret@127.0.0.1:{closed_port()}/optuna"
    with pytest.raises(StoreError) as err:
        check_database(url, "the study storage")
    message = str(err.value)
    assert "cannot connect to the study storage postgresql://sharp:***@127.0.0.1" in message
    assert "is the database server running" in message and "Hunter2" not in message
    with pytest.raises(StoreError) as err:  # the same through open_study
        open_study(url, "s", get_objective("f1"))
    assert "Hunter2" not in str(err.value)
    with pytest.raises(StoreError, match="unknown database or driver"):
        check_database("postgresql+nosuchdriver://u:pw@127.0.0.1:1/x", "the study storage")
    check_database("sqlite:///relative.db", "ignored")  # sqlite and non-database URLs are not probed
    with pytest.raises(ConfigError, match="names no file"):
        check_storage("journal:")


def test_a_dead_process_is_told_from_a_live_one():
    me = identity()
    assert me["host"] == socket.gethostname() and not is_gone(me)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from optimize.workers import start_ticks

        worker = {"host": me["host"], "pid": child.pid, "started": start_ticks(child.pid)}
        assert not is_gone(worker)
        assert is_gone({**worker, "started": "1"})  # the pid now names a process started later
    finally:
        child.kill()
        child.wait()
    assert is_gone(worker)
    assert not is_gone({**worker, "host": "another-host"})  # another host's processes are never judged
    assert not is_gone(None) and not is_gone({"host": me["host"], "pid": "x"})


def fake_score(params):
    return {"f1": params["accept_threshold"], "em": 0.0, "lm_calls_per_q": 3.0}, False


def test_trials_of_a_dead_worker_are_failed_and_queued_again(tmp_path):
    storage = f"journal:{tmp_path}/s.journal"
    objective = get_objective("f1")
    study = open_study(storage, "s", objective)
    run_study(study, Tuner(SearchSpace(), objective, fake_score), 2)
    # a worker that died mid-trial: RUNNING, with its parameters drawn, its process gone
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    trial = study.ask()
    suggest(trial, SearchSpace())  # what the worker had drawn, from the space the study searches
    trial.set_user_attr(
        "worker", {"host": socket.gethostname(), "pid": child.pid, "started": "", "trial": trial.number}
    )
    live = study.ask()  # a live worker's trial (this process) stays
    live.set_user_attr("worker", {**identity(), "trial": live.number})

    again = open_study(storage, "s", objective)  # a new worker (or the restarted one) opens the study
    states = {t.number: t.state.name for t in again.trials}
    assert states[trial.number] == "FAIL" and states[live.number] == "RUNNING"
    (retry,) = [t for t in again.trials if t.system_attrs.get("failed_trial") == trial.number]
    assert retry.state.name == "WAITING" and retry.params == again.trials[trial.number].params
    assert reap_dead_trials(again) == []  # once only
    study.tell(live, 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the retry draws from the range its first run drew from
        assert run_study(again, Tuner(SearchSpace(), objective, fake_score), 5) == 2
    assert finished_trials(again) == 5
    (done,) = [t for t in again.trials if t.system_attrs.get("failed_trial") == trial.number]
    assert done.state.name == "COMPLETE" and retry.params.items() <= done.params.items()


def test_the_sampler_draws_by_trial_number_not_by_process():
    objective = get_objective("f1")
    drawn = []
    for _ in range(2):  # two workers with the same seed, each alone from the start
        study = optuna.create_study(direction="maximize", sampler=TrialSeededSampler(seed=3))
        seen: list[dict] = []
        drawn.append(seen)
        run_study(study, Tuner(SearchSpace(), objective, lambda p, seen=seen: (seen.append(p), fake_score(p))[1]), 4)
    assert drawn[0] == drawn[1]  # reproducible
    thresholds = [p["accept_threshold"] for p in drawn[0]]
    assert len(set(thresholds)) == 4  # and each trial number draws its own point

    # two workers sharing one study with the same seed: trial numbers differ, so do their points
    shared = optuna.create_study(direction="maximize")
    one, two = TrialSeededSampler(seed=3), TrialSeededSampler(seed=3)
    first, second = shared.ask(), shared.ask()
    one.before_trial(shared, shared._storage.get_trial(first._trial_id))
    two.before_trial(shared, shared._storage.get_trial(second._trial_id))
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)  # the default space's thresholds
    a = one.sample_independent(shared, first, "accept_threshold", dist)
    b = two.sample_independent(shared, second, "accept_threshold", dist)
    assert a != b and a == thresholds[0]


def test_a_trial_beyond_the_total_and_a_second_baseline_are_skipped():
    objective = get_objective("f1")
    study = optuna.create_study(direction="maximize", sampler=TrialSeededSampler(0))
    tuner = Tuner(SearchSpace(), objective, fake_score, n_trials=3)
    from optimize.policy_search import params_of
    from program.sharp.policy import SharpConfig

    base = params_of(SharpConfig(accept_threshold=0.5, max_repairs=1))
    assert enqueue_baseline(study, SearchSpace(), base)
    study.enqueue_trial(base, user_attrs={"baseline": True})  # what a second worker opening the study at once adds
    first, copy = study.ask(), study.ask()
    with pytest.raises(SkippedTrial, match="a copy of the baseline trial 0"):
        tuner(copy)
    study.tell(copy, state=optuna.trial.TrialState.FAIL)
    study.tell(first, tuner(first))
    # three workers reserve a trial at once when one of three is finished: the two lowest numbers run
    others = [study.ask() for _ in range(3)]
    with pytest.raises(SkippedTrial, match="not needed: 1 finished and 2 running of 3"):
        tuner(others[2])
    assert not others[2].params and others[2].user_attrs["skipped"].startswith("not needed")
    study.tell(others[2], state=optuna.trial.TrialState.FAIL)
    study.tell(others[1], tuner(others[1]))
    study.tell(others[0], tuner(others[0]))
    assert finished_trials(study) == 3
