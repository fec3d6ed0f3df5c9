"""Restamp a recording's rounds with this code's reading digests, where the code changed how a reading is
digested and not what a round reads (optimize/recording.py: config fields at their default left out of the
digest, 2026-12-06; the draft's reading settings gained the sentence-evidence fields, at defaults that read
whole passages as before):

    python -m experiments.lab.migrations.restamp_readings --dataset 2wikimultihopqa \\
        --recording workspace/recordings/2wikimultihopqa-train.jsonl

A round is restamped only when its stamp is the digest the previous rule gives for this program (the same
predictors and the same reading settings); any other stamp is left as it is (and a later recording reads that
round again).
"""

from __future__ import annotations

import logging
from pathlib import Path

from experiments.lab.migrations import migration_args, migration_parser, restamp
from experiments.runtime import Runtime
from optimize.recording import AFTER_DRAFT, readings
from program.digest import digest
from program.serving.saved import without_lms

log = logging.getLogger(__name__)

# the fields each action's digest covered under the previous rule (every one, default or not)
PREVIOUS = {
    "draft": ("ranker", "k_schedule", "passage_chars", "generator_adapter", "max_question_chars"),
    "retrieve": ("evidence_cap",),
    "focus": ("sub_k", "evidence_cap"),
    "compare": ("ranker", "sub_k", "max_sub_questions", "passage_chars", "generator_adapter", "structured_adapter",
                "planner_max_tokens", "compose_max_tokens", "max_question_chars"),
    "critic": ("passage_chars", "structured_adapter", "critic_max_tokens"),
}  # fmt: skip
PREDICTORS = {"draft": ("generator",), "retrieve": ("generator",), "focus": ("focuser",),
              "compare": ("planner", "generator", "composer"), "critic": ("critic",)}  # fmt: skip


def previous(program, action: str) -> str:
    config = program.config.model_dump(mode="json", include=set(PREVIOUS[action]))
    state = {name: without_lms(getattr(program, name).dump_state()) for name in PREDICTORS[action]}
    parts = {"action": action, "config": config, "state": state}
    if action in AFTER_DRAFT:
        parts["draft"] = previous(program, "draft")
    return digest(parts, 16)


def main() -> None:
    ap = migration_parser(__doc__)
    ap.add_argument("--recording", type=Path, required=True)
    args = migration_args(ap)
    program = Runtime(dataset=args.dataset, workspace=args.workspace).system("sharp", {})
    new = readings(program)
    old = {action: previous(program, action) for action in PREVIOUS}
    moved, kept = restamp(
        args.recording, lambda rec, rnd: new[rnd["action"]] if rnd.get("reading") == old.get(rnd["action"]) else None
    )
    log.info("restamped %d rounds of %s (%d left as they were)", moved, args.recording, kept)


if __name__ == "__main__":
    main()
