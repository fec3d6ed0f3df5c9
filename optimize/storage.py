"""Where studies live: any Optuna RDB URL (PostgreSQL, MySQL, SQLite) or a journal file.

* ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (or MySQL): several worker processes, on one machine or
  many, share one study. Checked once before use: a wrong password or a server that is down is a
  :class:`~program.errors.StoreError` that names the URL with the password masked.
* ``journal:PATH``: Optuna's JournalStorage over an append-only file (file locks): several worker
  processes on one machine, no database.
* ``sqlite:///PATH``: one worker (SQLite locks the whole file; parallel workers fail with "database is
  locked").
* ``memory:``: a study of this process alone, gone when it ends (`sharp build` runs each search anew from its
  start, so it keeps none).
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path
from typing import Any

from program.errors import ConfigError, StoreError

JOURNAL = "journal:"
MEMORY = "memory:"
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@]*):(?P<password>[^@/]*)@")
# engine options of a quick reachability check, per SQLAlchemy dialect
_CONNECT_ARGS = {"postgresql": {"connect_timeout": 5}, "mysql": {"connect_timeout": 5}}


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (nothing else changes)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", str(url))


def password_of(url: str) -> str | None:
    m = _USERINFO.search(str(url))
    return m["password"] if m and m["password"] else None


def scrub(text: str, url: str) -> str:
    """``text`` (an error message) without the password of ``url``, wherever it appears."""
    secret = password_of(url)
    text = redact_url(text)
    # a password of 1-3 characters cannot be told from ordinary text (masking it would garble the message)
    return text.replace(secret, "***") if secret and len(secret) >= 4 else text


def is_database_url(url: str) -> bool:
    return bool(re.match(r"^(postgres(ql)?|mysql|mariadb|mssql|oracle)(\+\w+)?://", str(url)))


def check_database(url: str, what: str, error: type[Exception] = StoreError) -> None:
    """Connect once to the database at ``url`` (5 s timeout); raise ``error`` saying why it failed, the
    URL shown without its password. SQLite and non-database URLs are not checked."""
    if not is_database_url(url):
        return
    import sqlalchemy
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.pool import NullPool

    shown = redact_url(url)
    try:
        engine = sqlalchemy.create_engine(
            url,
            poolclass=NullPool,
            connect_args=_CONNECT_ARGS.get(sqlalchemy.engine.make_url(url).get_backend_name(), {}),
        )
    except ModuleNotFoundError as exc:
        raise error(
            f"{what} {shown} needs the database driver {exc.name!r}; install it "
            f"(PostgreSQL: pip install 'psycopg[binary]')"
        ) from None
    except sa_exc.NoSuchModuleError as exc:
        raise error(f"{what} {shown}: unknown database or driver ({scrub(str(exc), url)})") from None
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise error(f"{what} {shown} is not a valid database URL: {scrub(str(exc), url)}") from None
    try:
        with engine.connect():
            pass
    except sa_exc.DBAPIError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        detail = " ".join(line.strip() for line in reason[:3] if line.strip())
        hint = ""
        if "password" in detail.lower() or "authentication" in detail.lower():
            hint = "; check the user name and password in the URL"
        elif "refused" in detail.lower() or "could not connect" in detail.lower() or "timeout" in detail.lower():
            hint = "; is the database server running, and on that host and port?"
        elif "does not exist" in detail.lower():
            hint = "; create it first (PostgreSQL: createdb NAME)"
        raise error(f"cannot connect to {what} {shown}: {scrub(detail, url)}{hint}") from None
    finally:
        engine.dispose()


def check_storage(url: str) -> None:
    """Fail now, before any work, if study storage ``url`` cannot be used."""
    url = str(url)
    if url.startswith(JOURNAL):
        path = _journal_path(url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder of journal storage {path}: {exc}") from None
    else:
        check_database(url, "the study storage", StoreError)


def _journal_path(url: str) -> Path:
    path = url[len(JOURNAL) :].removeprefix("//")
    if not path.strip() or path.strip() == ".":
        raise ConfigError(f"journal storage {url!r} names no file: use journal:/path/to/study.journal")
    return Path(path).expanduser()


def open_storage(url: str, heartbeat_s: int = 60, stale_trial_callback: Any = None) -> Any:
    """An Optuna storage for ``url`` (see the module docstring)."""
    import optuna
    from optuna.storages import RDBStorage

    url = str(url)
    if url == MEMORY:
        return optuna.storages.InMemoryStorage()
    if url.startswith(JOURNAL):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = _journal_path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return JournalStorage(JournalFileBackend(str(path)))
    check_database(url, "the study storage", StoreError)
    from sqlalchemy import exc as sa_exc

    heartbeat = (
        {
            "heartbeat_interval": heartbeat_s,
            "grace_period": 3 * heartbeat_s,
            "heartbeat_stale_trial_callback": stale_trial_callback,
        }
        if heartbeat_s
        else {}
    )
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(url, **heartbeat)
        except (sa_exc.IntegrityError, sa_exc.ProgrammingError) as exc:
            # two workers creating the tables at once: the loser retries and finds them
            if attempt == 2:
                raise StoreError(f"cannot set up the study storage {redact_url(url)}: {scrub(str(exc), url)}") from None
            time.sleep(0.5 * (attempt + 1))
        except sa_exc.DBAPIError as exc:
            raise StoreError(f"the study storage {redact_url(url)} failed: {scrub(str(exc), url)}") from None
        except ImportError as exc:
            raise StoreError(f"the study storage {redact_url(url)} needs a database driver: {exc}") from None
    raise AssertionError("unreachable")
