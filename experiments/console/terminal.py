"""The terminal the CLI writes to: the console of results (stdout), the console of progress, warnings and
errors (stderr, so ``--json`` output stays one object), and the one way a duration is written. Below both
experiments/console/render.py and experiments/console/progress.py, which share them."""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def duration(seconds: float | None) -> str:
    """45s, 3m05s, 1h02m."""
    if seconds is None:
        return "?"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
