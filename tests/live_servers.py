"""Real servers on 127.0.0.1 for the integration tests: a throwaway PostgreSQL cluster, an MLflow tracking
server backed by it, and an OpenAI-compatible "rule LM" that answers each role's prompt by the toy world's
rules (so a scripted LM crosses process boundaries by configuration alone: ``--lm openai/rules --api-base``).

Every starter raises :class:`Unavailable` with the reason when a server cannot start; fixtures turn that
into a skip that says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from glob import glob
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fake_openai import QUICK_SHUTDOWN
from toy_world import RULES, fields_of, render_reply

ROOT = Path(__file__).resolve().parent.parent


class Unavailable(RuntimeError):
    """A server needed by a test cannot start here (the message says why)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    """Poll ``url`` until it answers 200; Unavailable (with the log's tail) on timeout or an exited process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise Unavailable(f"{proc.args[:3]} exited with {proc.returncode}: {_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise Unavailable(f"{url} did not answer within {timeout:.0f}s: {_tail(log)}")


def _tail(log: Path | None, n: int = 1500) -> str:
    if log is None or not log.exists():
        return ""
    return log.read_text(errors="replace")[-n:]


def remove_later(folder: Path) -> None:
    """Remove ``folder`` in a process of its own, not waited for: a cluster's thousands of files take seconds
    to delete on a busy disk, and nothing reads them again."""
    try:
        subprocess.Popen(
            ["rm", "-rf", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM the process group ``proc`` leads, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


# ---- PostgreSQL -------------------------------------------------------------------------------------
@dataclass
class Postgres:
    """A temporary PostgreSQL cluster: password auth over TCP on 127.0.0.1, owned by a throwaway folder."""

    bindir: Path
    root: Path
    port: int
    user: str = "sharp"
    password: str = field(default_factory=lambda: "pw-" + os.urandom(6).hex())
    run_as: str | None = None  # initdb/postgres refuse to run as root: then as this user

    def url(self, database: str, password: str | None = None, driver: str = "postgresql") -> str:
        return f"{driver}://{self.user}:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *args] if self.run_as else list(args)

    def start(self) -> None:
        data, pwfile = self.root / "data", self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.run_as:
            shutil.chown(self.root, self.run_as)
            shutil.chown(pwfile, self.run_as)
        initdb = self._cmd(
            str(self.bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        done = subprocess.run(initdb, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise Unavailable(f"initdb failed: {done.stderr.strip()[-800:]}")
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        done = subprocess.run(
            self._cmd(
                str(self.bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.root / "log"), "-w", "start"
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise Unavailable(f"pg_ctl start failed: {done.stderr.strip()[-400:]} {_tail(self.root / 'log', 800)}")

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"),
            capture_output=True,
            timeout=60,
        )
        remove_later(self.root)


def find_pg_bindir() -> Path:
    env = os.environ.get("SHARP_PG_BINDIR")
    candidates = ([env] if env else []) + sorted(glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    which = shutil.which("initdb")
    if which:
        return Path(which).parent
    raise Unavailable("PostgreSQL is not installed (no initdb; `apt-get install postgresql`, or set SHARP_PG_BINDIR)")


def start_postgres() -> Postgres:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("the PostgreSQL driver psycopg is not installed (pip install 'psycopg[binary]')") from None
    bindir = find_pg_bindir()
    run_as = None
    if os.geteuid() == 0:
        run_as = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
        if run_as is None or not shutil.which("runuser"):
            raise Unavailable("running as root, and no 'postgres'/'nobody' user or runuser to start PostgreSQL as")
    root = Path(tempfile.mkdtemp(prefix="sharp-pg-", dir="/tmp"))
    os.chmod(root, 0o700)
    pg = Postgres(bindir=bindir, root=root, port=free_port(), run_as=run_as)
    try:
        pg.start()
    except (Unavailable, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise Unavailable(f"PostgreSQL could not start: {exc}") from None
    return pg


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# ---- MLflow tracking server -------------------------------------------------------------------------
@dataclass
class MlflowServer:
    uri: str
    proc: subprocess.Popen
    artifacts: Path
    log: Path

    def stop(self) -> None:
        stop_process(self.proc)


def start_mlflow_server(
    backend_uri: str, folder: Path, timeout: float = 180, env: dict[str, str] | None = None
) -> MlflowServer:
    """``mlflow server`` on a free port with ``backend_uri`` as its store and proxied artifacts in ``folder``;
    ``env``: the server's environment (child_env() of now by default). Without MLflow's job runner, as
    `sharp mlflow-ui` runs it (experiments/tracking.py): one process less to start and to stop (seconds)."""
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    if not mlflow_bin.exists():
        raise Unavailable(f"no mlflow executable next to {sys.executable}")
    port = free_port()
    artifacts = folder / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    log = folder / "mlflow-server.log"
    cmd = [
        str(mlflow_bin),
        "server",
        "--backend-store-uri",
        backend_uri,
        "--artifacts-destination",
        str(artifacts),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=folder,
            env={**(env or child_env()), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_http(uri + "/health", timeout, proc, log)
    except Unavailable:
        stop_process(proc)
        raise
    return MlflowServer(uri=uri, proc=proc, artifacts=artifacts, log=log)


# ---- an OpenAI-compatible server that answers by the toy world's rules ----------------------------------
_OUTPUTS = re.compile(r"Your output fields are:\n(.*?)(?:\n\n|\Z)", re.S)


def role_of(system: str) -> str:
    """Which role a DSPy system message asks for, from its output fields."""
    outputs = _OUTPUTS.search(system)
    names = set(re.findall(r"`(\w+)`", outputs.group(1) if outputs else system))
    if "verdict" in names:
        return "critic"
    if "sub_questions" in names:
        return "planner"
    if "hops" in names:
        return "hop_planner"
    if names == {"answer"}:
        return "composer"
    if "answer" in names:
        return "generator"
    raise ValueError(f"no rule for output fields {sorted(names)}")


class RuleServer:
    """``openai/rules`` at ``self.base``: each chat completion is answered by RULES[role](input fields) (``rules``:
    another world's), without token log-probabilities.

    ``requests`` counts completions served; ``delay`` slows every reply and ``hold()`` holds every reply
    until ``release()`` (kill tests catch a run mid-way: waiting on the LM with a trial or a step open).
    """

    def __init__(self, delay: float = 0.0, rules: dict | None = None):
        self.delay = delay
        self.rules = rules or RULES  # role -> (input fields -> reply fields): another world's rules
        self._open = threading.Event()
        self._open.set()
        self.requests = 0
        self.roles: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server._open.wait(90)
                status, payload = server.reply(body)
                data = json.dumps(payload).encode()
                if server.delay:
                    time.sleep(server.delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client went away (a killed process)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, client_address: None
        threading.Thread(target=self.httpd.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @staticmethod
    def _text(content) -> str:
        if isinstance(content, list):
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return content or ""

    def reply(self, body: dict) -> tuple[int, dict]:
        messages = body.get("messages") or []
        system = "".join(self._text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
        last = self._text(messages[-1].get("content")) if messages else ""
        try:
            role = role_of(system)
        except ValueError as exc:
            return 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
        reply = {k: v for k, v in self.rules[role](fields_of(last)).items() if not k.startswith("_")}
        text = render_reply(system, reply)
        with self._lock:
            self.requests += 1
            self.roles.append(role)
            n = self.requests
        return 200, {
            "id": f"rules-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "rules"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()


def sharp_cmd(*args: str) -> list[str]:
    """``sharp ARGS`` run from this checkout's code (not an installed copy)."""
    return [sys.executable, "-m", "experiments.cli", *args]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        # as in an activated venv: its tools (mlflow, uvicorn) on PATH; this checkout's code first
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        ANONYMIZED_TELEMETRY="False",
        MLFLOW_ENABLE_ASYNC_LOGGING="false",
    )
    env.update(extra)
    return env
