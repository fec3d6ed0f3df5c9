"""DSPy's response cache, made explicit: where it lives, and a cold cache for honest evaluations.

DSPy caches every LM response (memory + disk at $DSPY_CACHEDIR, default ~/.dspy_cache) keyed by
model, messages and generation settings. That is what makes re-running an optimizer cheap, and
what lets an evaluation after optimizing silently reuse answers. Per LM, ``LMSpec.cache=False``
skips it; per run, :func:`use_cache_dir` points it elsewhere and :func:`cold_cache` gives a block
an empty one. Cache hits are flagged ``cached=True`` in the call records either way.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
