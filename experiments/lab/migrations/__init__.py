"""One-off migrations of recordings and saved programs to what later code reads (each module says which)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path


def migration_parser(doc: str | None) -> argparse.ArgumentParser:
    """A migration's command line, its module docstring as help: --dataset, then the migration's own options
    (:func:`migration_args` adds --workspace and parses them)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    return ap


def migration_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """``ap``'s arguments and --workspace (default ./workspace), parsed; the migration's report logged at INFO."""
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return args


def restamp(path: Path, stamp: Callable[[dict, dict], str | None]) -> tuple[int, int]:
    """Rewrite the recording at ``path`` (atomically; a line cut by a kill is dropped) with each round's
    reading stamp replaced by ``stamp(record, round)`` where that gives one; return (restamped, left)."""
    lines, moved, left = [], 0, 0
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        for rnd in rec.get("rounds") or []:
            new = stamp(rec, rnd)
            if new is None:
                left += 1
            else:
                rnd["reading"], moved = new, moved + 1
        lines.append(json.dumps(rec))
    tmp = path.with_name(f"{path.name}.restamp.tmp")
    tmp.write_text("".join(f"{x}\n" for x in lines))
    tmp.replace(path)
    return moved, left
