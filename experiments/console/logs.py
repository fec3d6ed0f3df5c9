"""Where log records go when the CLI runs: a log file gets everything, the console only what a user acts on.

* The log file (``WORKSPACE/logs/sharp.log``, or ``--log-file`` / ``$SHARP_LOG_FILE``) gets every record at
  INFO (DEBUG with ``-v``), ours and the libraries' (onnxruntime's fusions and quantizer, MLflow's and
  alembic's store set-up, httpx, LiteLLM, chromadb, bm25s, sentence-transformers, Python warnings).
  Records that come before the command has said which workspace it uses are held in memory and written
  there once it does (:func:`use_workspace`, called when a workspace is resolved).
* The console (stderr) gets our own WARNING and above (program, data, optimize, experiments) and the
  libraries' ERROR and above; with ``-v``, everything, as before.

Some libraries give their loggers their own console handlers and stop them propagating (dspy and mlflow
at import, LiteLLM at its first use, alembic when MLflow creates a store): :func:`adopt_library_loggers`
takes those handlers away so their records come here; it runs at set-up, when a workspace is resolved,
when MLflow is configured and whenever a progress display starts or moves.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import shlex
import sys
from pathlib import Path

log = logging.getLogger(__name__)

OUR_PACKAGES = ("program", "data", "optimize", "experiments", "__main__")
LOG_NAME = "sharp.log"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d]: %(message)s"
CONSOLE_FORMAT = "%(levelname)s %(name)s: %(message)s"
VERBOSE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONSOLE_WIDTH = 300  # characters of a record shown on the console (without -v)
# records kept in memory until the command names its workspace (more are dropped, oldest kept)
BUFFER_CAPACITY = 20_000


def is_ours(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in OUR_PACKAGES)


class ConsoleFilter(logging.Filter):
    """Our WARNING+ and the libraries' ERROR+ (everything when verbose)."""

    def __init__(self, verbose: bool = False):
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose:
            return True
        return record.levelno >= (logging.WARNING if is_ours(record.name) else logging.ERROR)


class OneLine(logging.Formatter):
    """A record on one console line: whitespace collapsed, cut at ``width`` (the log file keeps it whole)."""

    def __init__(self, fmt: str, width: int = CONSOLE_WIDTH):
        super().__init__(fmt)
        self.width = width

    def format(self, record: logging.LogRecord) -> str:
        text = " ".join(super().format(record).split())
        return text if len(text) <= self.width else text[: self.width] + " ... (whole in the log file)"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (a live progress display redirects it to
    print above itself; a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it
        pass


class _Buffer(logging.handlers.MemoryHandler):
    """Holds the records until the log file is known; never flushes on its own."""

    def __init__(self) -> None:
        super().__init__(BUFFER_CAPACITY, flushLevel=logging.CRITICAL + 1, target=None, flushOnClose=False)

    def shouldFlush(self, record: logging.LogRecord) -> bool:
        return False

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.buffer) < self.capacity:
            self.buffer.append(record)


class _State:
    configured = False
    verbose = False
    explicit_file: Path | None = None
    file: Path | None = None
    handlers: list[logging.Handler] = []
    failed: set[Path] = set()


_state = _State()


def reset() -> None:
    """Take away what :func:`configure` installed (the handlers; Python warnings back to stderr)."""
    root = logging.getLogger()
    for h in _state.handlers:
        root.removeHandler(h)
        h.close()
    _state.handlers = []
    _state.configured, _state.file, _state.explicit_file = False, None, None
    logging.captureWarnings(False)


def configure(verbose: bool = False, log_file: str | os.PathLike | None = None, command: str | None = None) -> None:
    """The CLI's logging (idempotent: a second call replaces what the first installed). ``command``: the
    subcommand, named in the first record of the run."""
    reset()
    _state.configured, _state.verbose = True, verbose
    log_file = log_file or os.environ.get("SHARP_LOG_FILE") or None
    _state.explicit_file = Path(log_file).expanduser().resolve() if log_file else None
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.INFO)
    console = _StderrHandler()
    console.setFormatter(logging.Formatter(VERBOSE_FORMAT) if verbose else OneLine(CONSOLE_FORMAT))
    console.addFilter(ConsoleFilter(verbose))
    console.setLevel(logging.DEBUG)
    _install(console)
    logging.captureWarnings(True)  # a library's DeprecationWarning goes to the file, not the console
    if _state.explicit_file is not None:
        _open_file(_state.explicit_file, None)
    else:
        _install(_Buffer())
    adopt_library_loggers()
    log.info("sharp %s started (command line: %s)", command or "", shlex.join(sys.argv))


def _install(handler: logging.Handler) -> None:
    logging.getLogger().addHandler(handler)
    _state.handlers.append(handler)


def _file_handler(path: Path) -> logging.Handler:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=False)
    handler.setFormatter(logging.Formatter(FILE_FORMAT))
    handler.setLevel(logging.DEBUG)
    return handler


def _open_file(path: Path, buffer: _Buffer | None) -> bool:
    try:
        handler = _file_handler(path)
    except OSError as exc:
        if path not in _state.failed:
            _state.failed.add(path)
            log.warning(
                "cannot write the log file %s (%s): the libraries' log records are not kept; "
                "pass --log-file PATH (e.g. sharp --log-file /tmp/sharp.log COMMAND)",
                path,
                exc.strerror or exc,
            )
        return False
    if buffer is not None:
        for record in buffer.buffer:
            handler.handle(record)
        buffer.buffer.clear()
    _install(handler)
    _state.file = path
    return True


def use_workspace(workspace: str | os.PathLike) -> Path | None:
    """Write the log to ``WORKSPACE/logs/sharp.log`` from now on (with what was held so far); a no-op
    unless the CLI set logging up, or when ``--log-file`` named the file. Returns the log file."""
    if not _state.configured:
        return None
    adopt_library_loggers()
    if _state.explicit_file is not None:
        return _state.file
    path = (Path(workspace) / "logs" / LOG_NAME).resolve()
    if _state.file == path:
        return path
    root = logging.getLogger()
    buffer = next((h for h in _state.handlers if isinstance(h, _Buffer)), None)
    old = [h for h in _state.handlers if isinstance(h, logging.FileHandler)]
    if not _open_file(path, buffer):
        return _state.file
    for h in [*old, *([buffer] if buffer else [])]:  # another workspace, or the buffer: this file from now on
        root.removeHandler(h)
        _state.handlers.remove(h)
        h.close()
    return path


def log_file() -> Path | None:
    """The file the records go to (None before a workspace is known, or when logging is not set up)."""
    return _state.file


def adopt_library_loggers() -> list[str]:
    """Take away the console handlers that libraries give their own loggers, and let those loggers
    propagate to the root (our console filter and the log file). Returns the loggers changed."""
    if not _state.configured:
        return []
    changed = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or is_ours(name) or not logger.handlers:
            continue
        streams = [
            h
            for h in logger.handlers
            if type(h) is logging.StreamHandler or type(h).__name__ in ("LevelRoutingStreamHandler", "RichHandler")
        ]
        if not streams:
            continue
        for h in streams:
            logger.removeHandler(h)
        logger.propagate = True
        changed.append(name)
    return changed
