"""Migrate a recording of drafts alone made in format 3 (the answer-critic rounds of commit 47db07c, with the
first answer token's alternatives in the generator step) to format 4 (program/sharp/rounds.py: reads only, each
round stamped with its action's reading digest), so the drafts need not be read again:

    python -m experiments.lab.migrations.drafts_v3_to_v4 --dataset hotpotqa \\
        --src workspace/recordings/hotpotqa-train-drafts.jsonl --out workspace/recordings/hotpotqa-train.jsonl

Only draft rounds move (a format-3 record's repairs were other actions); a record whose generator step lacks
the alternatives (made before they were kept) is left out, and a later recording reads its draft again. The
migrated rounds get the digest of this code's draft: a format-3 record's digest covered its whole program, so
that the draft read the same is a fact about the code, checked once for the recording migrated here
(``git diff 47db07c -- program/signatures.py`` leaves GenerateAnswer as it was; the draft's search, k,
passage length, adapter and generator settings, top-10 alternatives included, were those of this code).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from experiments.lab.migrations import migration_args, migration_parser
from experiments.runtime import Runtime
from optimize.recording import reading
from program.sharp.forms import question_form

log = logging.getLogger(__name__)


def migrate(rec: dict, digest: str) -> dict | None:
    if rec.get("format") != 3 or rec.get("error"):
        return None
    draft = next((r for r in rec.get("rounds") or [] if r.get("action") == "draft"), None)
    gen = next((s for s in (draft or {}).get("steps") or [] if s.get("role") == "generator"), None)
    if draft is None or gen is None or "answer_top" not in gen:
        return None
    q = rec["question"]
    read = {
        "question": q,
        "answer": draft["answer"],
        "evidence": draft["evidence"],
        "cited_ids": draft["cited_ids"],
        "confidence": draft.get("confidence"),
        "top": gen.get("answer_top"),
    }
    rnd = {"action": "draft", "read": read, "entities": [], "sub_questions": [], "values": [], "planned": False,
           "query": None, "fallback": None, "steps": draft["steps"], "calls": draft["calls"],
           "seconds": draft["seconds"], "critique": None, "critic_steps": [], "critic_calls": [], "reading": digest}  # fmt: skip
    return {"format": 4, "question": q, "truncated": rec.get("truncated", False), "form": question_form(q),
            "queries": rec.get("queries") or [q], "rounds": [rnd], "critiqued": False, "error": None,
            "id": rec["id"], "seconds": rec.get("seconds")}  # fmt: skip


def main() -> None:
    ap = migration_parser(__doc__)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = migration_args(ap)
    rt = Runtime(dataset=args.dataset, workspace=args.workspace, retriever_config={"ranker": args.dataset})
    program = rt.system("sharp", {})
    digest = reading(program, "draft")
    kept, left = [], 0
    for line in args.src.read_text().splitlines():
        out = migrate(json.loads(line), digest)
        if out is None:
            left += 1
        else:
            kept.append(out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as fh:
        for rec in kept:
            fh.write(json.dumps(rec) + "\n")
    log.info("migrated %d drafts into %s (%d left out)", len(kept), args.out, left)


if __name__ == "__main__":
    main()
