"""DSPy's response cache, made explicit: where it lives, and a cold cache for honest evaluations.

DSPy caches every LM response (memory + disk at $DSPY_CACHEDIR, default ~/.dspy_cache) keyed by
model, messages and generation settings. That is what makes re-running an optimizer cheap, and
what lets an evaluation after optimizing silently reuse answers. Per LM, ``LMSpec.cache=False``
skips it; per run, :func:`use_cache_dir` points it elsewhere and :func:`cold_cache` gives a block
an empty one. Cache hits are flagged ``cached=True`` in the call records either way. A reply the
program could not use (unparseable, empty) is dropped from the cache again (:func:`forget`), so a
later run asks the model anew instead of replaying it.
"""

from __future__ import annotations

import contextvars
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dspy


def use_cache_dir(directory: str | Path | None = None, *, disk: bool = True, memory: bool = True) -> None:
    """Point DSPy's cache at ``directory`` (None: DSPy's default) for the rest of the process."""
    kwargs = {"enable_disk_cache": disk, "enable_memory_cache": memory}
    if directory is not None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        kwargs["disk_cache_dir"] = str(directory)
    dspy.configure_cache(**kwargs)


@contextmanager
def cold_cache(directory: str | Path | None = None, *, disk: bool = True) -> Iterator[Path]:
    """Run a block against an empty cache (a fresh temp folder unless ``directory`` is given;
    memory only with ``disk=False``), then restore the previous cache object. Calls inside
    still cache among themselves."""
    previous = dspy.cache
    with tempfile.TemporaryDirectory(prefix="sharp-cold-cache-") as tmp:
        path = Path(directory or tmp)
        use_cache_dir(path, disk=disk)
        try:
            yield path
        finally:
            dspy.cache = previous


# ---- replies the program could not use are not replayed ------------------------------------------
# DSPy stores every reply before anyone has read it, so an unparseable one would be served to every
# later run with the same prompt (a fresh workspace sharing the cache then made no request at all).
# Each SharpLM call notes its cache key in the open notebooks; a step that could not use its replies
# (program.tracing.Tracer.call) forgets them, and SharpLM forgets an empty reply before retrying.
_notebooks: contextvars.ContextVar[tuple[list[str], ...]] = contextvars.ContextVar("sharp_reply_keys", default=())


def reply_key(lm: Any, call: Any, asynchronous: bool = False) -> str | None:
    """The key under which DSPy caches (or found) the reply to ``call`` (a prepared call of ``lm``)."""
    if not getattr(call, "cache", False):
        return None
    from dspy.clients.execution import IGNORED_CACHE_KEYS

    try:
        return dspy.cache.cache_key(call.key(lm, asynchronous), IGNORED_CACHE_KEYS)
    except Exception:  # DSPy skips caching a request it cannot key; so do we
        return None


@contextmanager
def noting_replies() -> Iterator[list[str]]:
    """Collect the cache keys of the replies of every SharpLM call made inside this block."""
    keys: list[str] = []
    token = _notebooks.set(_notebooks.get() + (keys,))
    try:
        yield keys
    finally:
        _notebooks.reset(token)


def note_reply(key: str | None) -> None:
    if key is not None:
        for keys in _notebooks.get():
            keys.append(key)


def forget(keys: Iterable[str | None]) -> int:
    """Drop these replies from DSPy's cache (memory and disk); return how many entries were dropped."""
    cache, dropped = dspy.cache, 0
    for key in dict.fromkeys(k for k in keys if k):
        with cache._lock:
            dropped += cache.memory_cache.pop(key, None) is not None
        disk = cache.disk_cache
        dropped += bool(disk.delete(key) if hasattr(disk, "delete") else disk.pop(key, None) is not None)
    return dropped
