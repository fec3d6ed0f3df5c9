"""run_each: an interrupt stops the run at once instead of running every queued item first."""

import threading

import pytest

from program.serving.batch import run_each


def test_one_thread_runs_in_the_callers_thread_in_order():
    seen = []
    out = list(run_each(lambda x: (seen.append(threading.current_thread()), x * 2)[1], [1, 2, 3], threads=1))
    assert out == [2, 4, 6]
    assert set(seen) == {threading.current_thread()}  # so Ctrl-C / SIGTERM lands in the running item


def test_one_thread_interrupt_stops_before_the_next_item():
    ran = []

    def fn(x):
        ran.append(x)
        if x == 2:
            raise KeyboardInterrupt("terminated by signal 15")
        return x

    with pytest.raises(KeyboardInterrupt):
        list(run_each(fn, range(10), threads=1))
    assert ran == [0, 1, 2]


def test_threads_interrupt_cancels_the_queue_and_does_not_wait_for_running_items():
    release = threading.Event()
    ran = []
    lock = threading.Lock()

    def fn(x):
        with lock:
            ran.append(x)
        if x >= 2:
            release.wait(10)  # running items block until the test lets them go
        return x

    results = run_each(fn, range(20), threads=2)
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in results:
                raise KeyboardInterrupt  # the signal arrives in the consuming (main) thread
        assert not release.is_set()  # we got here while two items were still blocked: no waiting
    finally:
        release.set()
    assert len(ran) <= 4 and set(ran) <= {0, 1, 2, 3}  # items 4..19 were cancelled, never run


def test_threads_return_every_result():
    assert sorted(run_each(lambda x: x + 1, range(7), threads=3)) == list(range(1, 8))
