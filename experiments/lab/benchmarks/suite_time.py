"""What a set of test files adds to `make test`: the whole suite, then the same without them, back to back.

    python -m experiments.lab.benchmarks.suite_time --json OUT [--files F ...] [--workers auto]

Runs what `make test` runs (``pytest -q --durations=0 -n auto --maxprocesses=4 --dist loadfile``) twice: every test,
then with ``--ignore`` for each of ``--files``. Reports each run's wall seconds, pytest's own seconds and the tests
passed, the wall the files add, and their durations (setup, call and teardown, as ``--durations=0`` prints them),
summed per file (each run's whole output: WORKSPACE/logs/NAME-all.log and NAME-without.log, NAME the --json's stem).
Run it on a quiet machine (no model job beside it): the wall is the figure.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

# issue 39's new test files
FILES = (
    "tests/experiments/test_build.py",
    "tests/experiments/test_manifest_rebuild.py",
    "tests/experiments/test_build_studies.py",
    "tests/experiments/test_estimate.py",
    "tests/data/test_buildable.py",
    "tests/optimize/test_gate_without_logprobs.py",
)
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+?)::(\S+)")
SUMMARY = re.compile(r"(\d+) passed.* in ([\d.]+)s")


def run(args: list[str], log: Path) -> dict:
    """One pytest run: its wall, pytest's seconds, passed, and every duration line."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    log.write_text(out)
    summary = SUMMARY.findall(out)
    durations = [(float(m[1]), m[2], m[3], m[4]) for m in map(DURATION.match, out.splitlines()) if m]
    return {
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "pytest_s": float(summary[-1][1]) if summary else None,
        "passed": int(summary[-1][0]) if summary else None,
        "durations": durations,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--files", nargs="+", default=list(FILES))
    ap.add_argument("--workers", default="auto")
    args = ap.parse_args(argv)
    base = ["-q", "-p", "no:cacheprovider", "--durations=0", "-n", args.workers, "--maxprocesses=4",
            "--dist", "loadfile"]  # fmt: skip
    # the two runs' whole output, beside the workspace's other logs (not beside the committed figures)
    from experiments import settings

    folder = settings.workspace(None) / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / args.json.stem
    every = run(base, Path(f"{logs}-all.log"))
    without = run([*base, *(f"--ignore={f}" for f in args.files)], Path(f"{logs}-without.log"))
    per_file: dict[str, float] = {}
    slowest = []
    for seconds, when, path, test in every["durations"]:
        if path in args.files:
            per_file[path] = round(per_file.get(path, 0.0) + seconds, 2)
            slowest.append((seconds, f"{when} {path}::{test}"))
    report = {
        "what": "the wall the files add to make test, measured back to back on this machine",
        "command": "python -m experiments.lab.benchmarks.suite_time " + " ".join(argv or sys.argv[1:]),
        "files": args.files,
        "all tests": {k: every[k] for k in ("returncode", "passed", "pytest_s", "wall_s")},
        "without the files": {k: without[k] for k in ("returncode", "passed", "pytest_s", "wall_s")},
        "added_wall_s": round(every["wall_s"] - without["wall_s"], 1),
        "their durations_s": {**per_file, "sum": round(sum(per_file.values()), 1)},
        "slowest": {name: s for s, name in sorted(slowest, reverse=True)[:6]},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("all tests", "without the files", "added_wall_s", "their durations_s")}))


if __name__ == "__main__":
    main()
