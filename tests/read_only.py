"""Read-only folders in tests, also when the tests run as root (where `chmod a-w` stops no write).

A child process runs the code under test: as a normal user plainly, as root under
``setpriv`` without CAP_DAC_OVERRIDE (root then obeys permission bits like anyone). When neither
makes a read-only folder refuse a write, the test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETPRIV = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]


def chmod_tree(path: Path, writable: bool) -> None:
    for p in [path, *path.rglob("*")]:
        mode = p.stat().st_mode
        p.chmod(mode | 0o200 if writable else mode & ~0o222)


def unprivileged(read_only_dir: Path) -> list[str]:
    """A command prefix under which writes into ``read_only_dir`` (already chmod a-w) fail."""
    probe = read_only_dir / ".write-probe"
    prefixes = [[]] + ([SETPRIV] if shutil.which("setpriv") else [])
    for prefix in prefixes:
        done = subprocess.run([*prefix, "touch", str(probe)], capture_output=True)
        if done.returncode != 0:
            return prefix
        probe.unlink(missing_ok=True)
    pytest.skip(
        "a read-only folder cannot be made here: the tests run as root (chmod stops no write) and "
        "setpriv cannot drop CAP_DAC_OVERRIDE"
    )


def run_python(prefix: list[str], code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` in a child Python that imports this checkout (and tests/retrieval/, tests/)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in (ROOT, ROOT / "tests" / "retrieval", ROOT / "tests")),
        "HF_HUB_OFFLINE": "1",
        "ANONYMIZED_TELEMETRY": "False",
    }
    return subprocess.run(
        [*prefix, sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT
    )
