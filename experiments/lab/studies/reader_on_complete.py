"""Study of the reader alone: EM on the questions whose evidence held every gold paragraph (issue 20, lever 3).

    python -m experiments.lab.studies.reader_on_complete LABEL=RESULTS.jsonl [LABEL=RESULTS.jsonl ...] [--json]

Reads compact result files (experiments/results/...; no model runs) and reports, per system: its EM on the
questions where *its own* evidence was complete (all-gold = 1), its EM on the questions where *every* listed
system's evidence was complete (the same questions for all, so the readers compare directly). Only questions
every file holds are counted. Costs are the arena report's (a cached call's tokens are imputed there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from optimize.evaluate import read_results


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def reader_on_complete(files: dict[str, Path]) -> dict:
    """EM on complete evidence per system (its own complete questions, and those complete for all)."""
    rows = {label: {r["id"]: r for r in read_results(path) if "id" in r} for label, path in files.items()}
    shared = set.intersection(*(set(r) for r in rows.values())) if rows else set()
    complete_for_all = {q for q in shared if all(rows[label][q].get("all_gold") == 1 for label in rows)}
    out: dict = {"shared_questions": len(shared), "complete_for_all": len(complete_for_all), "systems": {}}
    for label, by_id in rows.items():
        own = [q for q in shared if by_id[q].get("all_gold") == 1]
        out["systems"][label] = {
            "complete": len(own),
            "em_on_own_complete": _mean([by_id[q]["em"] for q in own]),
            "em_on_complete_for_all": _mean([by_id[q]["em"] for q in complete_for_all]),
        }
    return out


def _markdown(result: dict) -> str:
    lines = [
        f"{result['shared_questions']} shared questions; {result['complete_for_all']} with complete evidence for all",
        "",
        "| system | complete | EM on its complete | EM on complete for all |",
        "|---|---|---|---|",
    ]
    for label, s in result["systems"].items():
        lines.append(f"| {label} | {s['complete']} | {s['em_on_own_complete']} | {s['em_on_complete_for_all']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="LABEL=RESULTS.jsonl (compact result files)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    files = {}
    for item in args.files:
        label, sep, path = item.partition("=")
        if not sep or not label or not Path(path).is_file():
            ap.error(f"{item!r}: expected LABEL=PATH of an existing results file")
        files[label] = Path(path)
    result = reader_on_complete(files)
    sys.stdout.write((json.dumps(result, indent=2) if args.json else _markdown(result)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
