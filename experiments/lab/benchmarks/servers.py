"""Servers the bench starts: each binds 127.0.0.1 on a free port and is stopped when its block ends.

    with chroma_server(folder) as url: ...          # `chroma run --path folder`
    with lm_server("local/qwen2.5-coder-1.5b") as base: ...   # `sharp lm serve`, base = http://…/v1

The block ends, and the process is stopped (SIGTERM, then SIGKILL after ``stop_timeout``), also when
the code inside raises or is interrupted. A server that exits or does not answer in time is a
:class:`ServerStartError` with the end of its log.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from program.errors import SharpError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
PROJECT_ROOT = Path(__file__).resolve().parents[3]


class ServerStartError(SharpError, RuntimeError):
    """A server the bench needs did not start (missing command, exited, or never answered)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, timeout)
        proc.kill()
        proc.wait()


@contextmanager
def managed_process(name: str, cmd: Sequence[str], ready_url: str, wait_s: float) -> Iterator[subprocess.Popen]:
    """Start ``cmd``; yield it once ``ready_url`` answers 200; stop it when the block ends."""
    slug = "".join(c if c.isalnum() else "-" for c in name)
    with tempfile.NamedTemporaryFile(prefix=f"sharp-bench-{slug}-", suffix=".log", delete=False) as fh:
        log_path = Path(fh.name)
    try:
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT)
    except OSError as exc:
        raise ServerStartError(f"cannot start {name} ({' '.join(cmd)}): {exc}") from None
    try:
        deadline = time.monotonic() + wait_s
        while not _answers(ready_url):
            if proc.poll() is not None:
                raise ServerStartError(f"{name} exited with {proc.returncode}: {_tail(log_path)}")
            if time.monotonic() > deadline:
                raise ServerStartError(f"{name} did not answer at {ready_url} within {wait_s:.0f} s: {_tail(log_path)}")
            time.sleep(0.25)
        log.info("%s is up (pid %d, log %s)", name, proc.pid, log_path)
        yield proc
    finally:
        stop(proc)
        log.info("%s stopped", name)
        log_path.unlink(missing_ok=True)


def chroma_command() -> Path:
    path = Path(sys.executable).parent / "chroma"
    if not path.exists():
        raise ServerStartError(f"no `chroma` command next to {sys.executable} (the chromadb package installs it)")
    return path


@contextmanager
def chroma_server(folder: Path, wait_s: float = 90.0) -> Iterator[str]:
    """A Chroma server (`chroma run`) keeping its data in ``folder``; yields its URL."""
    port = free_port()
    url = f"http://{HOST}:{port}"
    cmd = [str(chroma_command()), "run", "--path", str(folder), "--host", HOST, "--port", str(port)]
    with managed_process("chroma run", cmd, f"{url}/api/v2/heartbeat", wait_s):
        yield url


@contextmanager
def lm_server(
    model: str, *, n_threads: int = 2, n_ctx: int = 8192, parallel: int = 1, wait_s: float = 240.0
) -> Iterator[str]:
    """`sharp lm serve` for a local model, in its own process (``parallel`` slots of ``n_threads`` threads);
    yields its OpenAI base URL (…/v1)."""
    port = free_port()
    cmd = [sys.executable, "-m", "experiments.cli", "lm", "serve", "--model", model, "--host", HOST]
    cmd += ["--port", str(port), "--n-threads", str(n_threads), "--n-ctx", str(n_ctx), "--parallel", str(parallel)]
    with managed_process("sharp lm serve", cmd, f"http://{HOST}:{port}/health", wait_s):
        yield f"http://{HOST}:{port}/v1"
