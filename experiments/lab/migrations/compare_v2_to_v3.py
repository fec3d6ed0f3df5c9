"""Restamp a recording's comparison rounds from code version 2 to 3 (optimize/recording.py CODE_VERSIONS),
where version 3 reads what version 2 read:

    python -m experiments.lab.migrations.compare_v2_to_v3 --dataset hotpotqa \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--program program/compiled/sharp-hotpotqa.json]

Version 3 changed one thing in what a comparison round reads: where the planner writes fewer than two
sub-questions for a choice between two named options, code writes a check per option from the question
(program.sharp.forms.rule_checks) instead of leaving the draft to stand. So a version-2 round is what version 3 reads
unless the planner fell short on it and the rule writes checks for its question; those rounds keep their old
stamp (a later recording reads them again), every other one is restamped. ``--program``: the program whose
reading the recording holds (default: the uncompiled SHARP), e.g. a ship check's recording of a shipped one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from experiments.lab.migrations import migration_args, migration_parser, restamp
from experiments.runtime import Runtime
from optimize import recording
from program.sharp.forms import options, rule_checks

log = logging.getLogger(__name__)


def stamps(program) -> tuple[str, str]:
    """The compare reading digest of ``program`` under version 2 and under this code's version."""
    return recording.reading(program, "compare", code_version=2), recording.reading(program, "compare")


def reads_the_same(question: str, rnd: dict) -> bool:
    """Whether version 3 reads what this version-2 round read."""
    short = str(rnd.get("fallback") or "").startswith("the planner wrote")
    return not (short and rule_checks(question, options(question)))


def main() -> None:
    ap = migration_parser(__doc__)
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--program", type=Path, default=None)
    args = migration_args(ap)
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    program = rt.load_program(args.program)[0] if args.program else rt.system("sharp", {})
    before, now = stamps(program)

    stale = []

    def stamp(rec: dict, rnd: dict) -> str | None:
        if rnd.get("action") != "compare" or rnd.get("reading") != before:
            return None
        if reads_the_same(rec["question"], rnd):
            return now
        stale.append(rec["id"])
        return None

    moved, _ = restamp(args.recording, stamp)
    log.info("restamped %d comparison rounds of %s; %d left to be read again (checks written by rule)",
             moved, args.recording, len(stale))  # fmt: skip


if __name__ == "__main__":
    main()
