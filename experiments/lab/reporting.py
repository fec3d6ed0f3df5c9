"""What the lab's report scripts share: their log lines, where a report was made, and its two files.

A report script (benchmarks/retrieval.py, benchmarks/scaling.py, studies/embedding.py, ...) logs its progress
to stderr (:func:`log_progress`), says in its report which machine made it, when, and by which command with
no folder of this machine in it (:func:`made_by`), and writes WORKSPACE/benchmarks/STEM.json and STEM.md
(:func:`write_report`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def log_progress() -> None:
    """INFO log lines with time and logger name, on stderr (a report's Markdown goes to stdout)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def made_by(module: str, argv: Sequence[str] | None, workspace: Path, machine: str = "no GPU") -> dict[str, str]:
    """The report's ``machine``, ``generated_at`` and ``command`` (``python -m MODULE ARGS``, the workspace
    written as WORKSPACE/... or relative to the checkout: settings.portable)."""
    from experiments import settings  # imported here: a script sets its environment (offline HF) first
    from program.retrieval.manifest import now_iso

    line = " ".join(sys.argv[1:] if argv is None else argv)
    return {
        "machine": f"{os.cpu_count()} CPU cores, {machine}",
        "generated_at": now_iso(),
        "command": settings.portable(f"python -m {module} {line}", workspace),
    }


def write_report(report: dict[str, Any], out_dir: Path, stem: str, markdown: Callable[[dict], str]) -> str:
    """OUT_DIR/STEM.json (the report) and OUT_DIR/STEM.md (``markdown(report)``); returns the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2))
    text = markdown(report)
    (out_dir / f"{stem}.md").write_text(text)
    return text
