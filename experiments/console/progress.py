"""Progress of the long steps (an index build, a system evaluated on N questions): done / total, elapsed,
ETA and, for questions, the running EM.

:class:`Tally` does the arithmetic from a clock it is given (tests use a fake one). :func:`showing`
displays a tally on stderr: a Rich live bar in a terminal; elsewhere (a pipe, a file, CI) a line when the
step starts, then at most one every ``interval`` seconds as it moves, a heartbeat line while one item
takes long, and one at the end. Every line also goes to the log file. stdout is left alone, so
``--json`` output stays one object.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from experiments.console import logs, terminal
from experiments.console.terminal import duration

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# a line at most this often when the display is not a terminal (and a heartbeat after this long)
INTERVAL = 30.0


@dataclass
class Tally:
    """How far one long step is. ``done`` counts items finished before this run (a resumed evaluation);
    the ETA is the items left times the seconds per item measured in this run, or, before the first one
    finishes, ``prior_seconds`` (an estimate, marked as one) when given."""

    total: int
    unit: str = "questions"
    done: int = 0
    clock: Clock = time.monotonic
    prior_seconds: float | None = None
    score_name: str | None = None  # e.g. "EM": a running mean of the scores passed to advance()
    score_sum: float = 0.0
    scored: int = 0
    failed: int = 0
    new: int = field(default=0, init=False)
    started: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self._lock = threading.Lock()

    def advance(self, n: int = 1, score: float | None = None, failed: bool = False) -> None:
        with self._lock:
            self.new += n
            self.done += n
            self.failed += n if failed else 0
            if self.score_name is not None and (score is not None or failed):
                self.score_sum += float(score or 0.0)
                self.scored += n

    @property
    def singular(self) -> str:
        return self.unit[:-1] if self.unit.endswith("s") else self.unit

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    @property
    def remaining(self) -> int:
        return max(self.total - self.done, 0)

    @property
    def seconds_per_item(self) -> float | None:
        """Measured in this run; None before the first item finishes."""
        return self.elapsed / self.new if self.new else None

    @property
    def eta_is_estimate(self) -> bool:
        return self.new == 0 and self.prior_seconds is not None

    @property
    def eta(self) -> float | None:
        """Seconds left: None when unknown (nothing finished yet and no prior estimate)."""
        if not self.remaining:
            return 0.0
        if self.new:
            return self.remaining * self.seconds_per_item
        if self.prior_seconds is None:
            return None
        return max(self.remaining * self.prior_seconds - self.elapsed, 0.0)  # the estimate counts down

    @property
    def score(self) -> float | None:
        return self.score_sum / self.scored if self.scored else None

    @property
    def rate(self) -> float | None:
        """Items per second in this run."""
        e = self.elapsed
        return self.new / e if self.new and e > 0 else None

    def status(self) -> str:
        """elapsed, ETA, the running score and failures: what follows the count on a progress line."""
        parts = [f"{duration(self.elapsed)} elapsed"]
        if not self.remaining:
            parts.append("done")
        elif self.eta is None:
            parts.append(f"ETA after the first {self.singular}")
        elif self.eta_is_estimate and self.eta == 0:
            parts.append(f"ETA: past the estimate, after the first {self.singular}")
        else:
            parts.append(f"ETA {'~' if self.eta_is_estimate else ''}{duration(self.eta)}")
        if self.unit != "questions" and self.rate is not None:
            parts.append(f"{self.rate:.0f} {self.unit}/s")
        if self.score_name is not None and self.score is not None:
            parts.append(f"{self.score_name} {self.score:.3f}")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return ", ".join(parts)

    def line(self, label: str) -> str:
        return f"{label}: {self.done}/{self.total} {self.unit}, {self.status()}"


class _Periodic:
    """The display where there is no terminal: lines, at most one per ``interval`` seconds."""

    def __init__(self, label: str, tally: Tally, console: Any, interval: float, heartbeat: bool):
        self.label, self.tally, self.console, self.interval = label, tally, console, interval
        self.last = tally.clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True) if heartbeat and interval > 0 else None

    def start(self) -> None:
        self.say(self.tally.line(self.label))
        if self._thread is not None:
            self._thread.start()

    def moved(self) -> None:
        t = self.tally
        if t.new == 1 or not t.remaining or t.clock() - self.last >= self.interval:
            self.say(t.line(self.label))

    def _beat(self) -> None:
        while not self._stop.wait(self.interval / 2):
            if self.tally.clock() - self.last >= self.interval:
                t = self.tally
                self.say(t.line(self.label) + (f" (on {t.singular} {t.done + 1})" if t.unit == "questions" else ""))

    def say(self, text: str) -> None:
        self.last = self.tally.clock()
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=1)


class _Live:
    """The display in a terminal: a Rich bar whose status (elapsed, ETA, EM) is recomputed at each refresh."""

    def __init__(self, label: str, tally: Tally, console: Any):
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
        from rich.text import Text

        class StatusColumn(ProgressColumn):
            """The count and the status, both read from the tally (one snapshot, never out of step)."""

            def render(self, task: Any) -> Text:
                text = Text(f"{tally.done}/{tally.total} {tally.unit} ")
                text.append(tally.status(), style="dim")
                return text

        self.tally = tally
        self.bar = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            StatusColumn(),
            console=console,
            transient=False,
        )
        self.task = self.bar.add_task(label, total=tally.total, completed=tally.done)

    def start(self) -> None:
        self.bar.start()

    def moved(self) -> None:
        self.bar.update(self.task, completed=self.tally.done)

    def stop(self) -> None:
        self.bar.update(self.task, completed=self.tally.done)
        self.bar.stop()


class Shown:
    """A tally on display: call :meth:`advance` as items finish (from any thread)."""

    def __init__(self, label: str, tally: Tally, display: Any):
        self.label, self.tally, self.display = label, tally, display

    def advance(self, n: int = 1, score: float | None = None, failed: bool = False) -> None:
        self.tally.advance(n, score, failed)
        logs.adopt_library_loggers()  # a library imported by the first item may have set up its own console
        log.info("%s", self.tally.line(self.label))
        if self.display is not None:
            self.display.moved()


def _console() -> Any:
    return terminal.err_console


@contextmanager
def showing(
    label: str,
    tally: Tally,
    *,
    enabled: bool = True,
    live: bool | None = None,
    console: Any = None,
    interval: float = INTERVAL,
    heartbeat: bool = True,
) -> Iterator[Shown]:
    """Show ``tally`` while the block runs (``enabled`` False: only the log file hears of it). ``live``:
    a Rich bar (default: when the console is a terminal), else periodic lines."""
    console = console or _console()
    display: Any = None
    if enabled:
        live = console.is_terminal if live is None else live
        display = _Live(label, tally, console) if live else _Periodic(label, tally, console, interval, heartbeat)
    logs.adopt_library_loggers()
    log.info("%s", tally.line(label))
    shown = Shown(label, tally, display)
    if display is not None:
        display.start()
    try:
        yield shown
    finally:
        if display is not None:
            display.stop()
        if tally.remaining:
            log.info("%s (stopped)", tally.line(label))


def counter(label: str, unit: str, **show: Any) -> Callable[[int, int], Any]:
    """A progress factory for data.indexing.build_index: ``(total, done) -> context manager`` yielding an
    ``advance(n)`` callback, displayed like :func:`showing`."""

    @contextmanager
    def factory(total: int, done: int) -> Iterator[Callable[[int], None]]:
        with showing(label, Tally(total, unit, done=done), **show) as shown:
            yield lambda n: shown.advance(n)

    return factory


def watched(system: Callable[..., Any], row_fn: Callable[[Any, Any], dict], shown: Shown) -> tuple[Callable, Callable]:
    """``system`` and ``row_fn`` for optimize.evaluate.evaluate that advance ``shown`` once per question:
    with its EM when it is scored, as failed when the system (or the scoring) raised."""

    def call(**kwargs: Any) -> Any:
        try:
            return system(**kwargs)
        except Exception:
            shown.advance(failed=True)
            raise

    def row(example: Any, prediction: Any) -> dict:
        try:
            out = row_fn(example, prediction)
        except Exception:
            shown.advance(failed=True)
            raise
        shown.advance(score=out.get("em"), failed=out.get("error") is not None)
        return out

    return call, row


@contextmanager
def status(text: str, *, enabled: bool = True, console: Any = None) -> Iterator[None]:
    """A spinner with ``text`` while something without a count runs (loading an index, a model); a
    single line where the console is not a terminal."""
    console = console or _console()
    log.info("%s", text)
    if not enabled:
        yield
        return
    if not console.is_terminal:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        yield
        return
    with console.status(text):
        yield
