"""Which process does a piece of work, and whether that process is gone.

A trial or a tracked run records :func:`identity` (host, pid, the process's start time); a later
process on the same host can then tell a trial or run left RUNNING by a *dead* process (killed with
SIGKILL, out of memory, a power cut: nothing could close it) from one a live process is still on.
Work recorded on another host is never judged: only that host can tell.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _stat(pid: int) -> list[str] | None:
    """The fields after the command name of /proc/PID/stat (None: no such process, or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), to tell it from a later one given its pid."""
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def identity() -> dict[str, Any]:
    """This process: {"host", "pid", "started"}."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": start_ticks(pid) or ""}


def is_gone(worker: Mapping[str, Any] | None) -> bool:
    """True only when ``worker`` (an :func:`identity`) ran on this host and that process no longer runs
    (no such pid, a zombie, or the pid now belongs to a process started later)."""
    if not worker or worker.get("host") != socket.gethostname():
        return False
    try:
        pid = int(worker.get("pid"))
    except (TypeError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by another user
        pass
    fields = _stat(pid)
    if fields is None:  # no /proc (not Linux): the pid exists, so assume it is the same process
        return False
    if fields[0] in ("Z", "X"):  # a zombie: dead, not yet waited for
        return True
    started = str(worker.get("started") or "")
    return bool(started) and len(fields) > 19 and fields[19] != started
