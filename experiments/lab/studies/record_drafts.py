"""Record SHARP's rounds on a slice of seeded questions, for the answer critic's fit and the policy's replay:
``optimize.recording.record`` through the runtime.

    python -m experiments.lab.studies.record_drafts --dataset hotpotqa --split train --offset 0 --n 598 \\
        --actions draft --out workspace/recordings/hotpotqa-train.jsonl
    python -m experiments.lab.studies.record_drafts --dataset hotpotqa --split train --offset 0 --n 598 \\
        --out workspace/recordings/hotpotqa-train.jsonl      # then every repair, reusing the drafts

Resumable: a stopped run records only the rounds its file lacks for this program's reading (a recording of
the drafts alone grows into one with every repair without reading a draft twice).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from experiments.runtime import Runtime
from optimize.recording import record
from program.sharp.rounds import ACTIONS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--offset", type=int, default=0, help="skip the first N seeded questions")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranker", default=None, help="evidence ranker name (default: the dataset's)")
    ap.add_argument("--critic-range", action="append", default=[], help="START:END seeded positions critiqued")
    ap.add_argument(
        "--actions",
        default=None,
        help=f"comma-separated actions to record (of {', '.join(ACTIONS)}; the draft always): default every repair",
    )
    ap.add_argument("--program", type=Path, default=None, help="a saved program (default: the uncompiled SHARP)")
    ap.add_argument(
        "--focus-when",
        choices=("flagged", "rejected"),
        default="flagged",
        help="record a focused read after flagged drafts only (default), or after every bridge draft",
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    actions = None if args.actions is None else tuple(a for a in args.actions.split(",") if a and a != "draft")
    unknown = set(actions or ()) - set(ACTIONS)
    if unknown:
        ap.error(f"--actions: unknown {sorted(unknown)}; choose from {', '.join(ACTIONS)}")
    rt = Runtime(
        dataset=args.dataset, workspace=args.workspace, retriever_config={"ranker": args.ranker or args.dataset}
    )
    examples = rt.examples(args.split, limit=args.offset + args.n, seed=args.seed)
    position = {ex.id: i for i, ex in enumerate(examples)}
    ranges = [tuple(int(x) for x in r.split(":")) for r in args.critic_range]
    todo = examples[args.offset :]
    program = rt.load_program(args.program)[0] if args.program else rt.system("sharp", {})
    record(
        program,
        todo,
        args.out,
        critique=lambda ex: any(a <= position[ex.id] < b for a, b in ranges),
        actions=actions,
        passages=rt.passages(),
        focus_when=args.focus_when,
    )


if __name__ == "__main__":
    main()
