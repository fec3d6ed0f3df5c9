"""Record SHARP's every round (draft, retrieval repair, decomposed read) on a slice of seeded questions, for
the answer critic's fit and the policy's replay: ``optimize.replay.record`` through the runtime.

    python -m experiments.lab.studies.record_drafts --dataset hotpotqa --split train --offset 318 --n 280 \\
        --critic-range 318:368 --critic-range 448:498 --out workspace/recordings/hotpotqa-train.jsonl

Resumable: a stopped run records only the questions its file lacks.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from experiments.runtime import Runtime
from optimize.replay import record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--offset", type=int, default=0, help="skip the first N seeded questions")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranker", default=None, help="evidence ranker name (default: the dataset's)")
    ap.add_argument("--critic-range", action="append", default=[], help="START:END seeded positions critiqued")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(
        dataset=args.dataset, workspace=args.workspace, retriever_config={"ranker": args.ranker or args.dataset}
    )
    examples = rt.examples(args.split, limit=args.offset + args.n, seed=args.seed)
    position = {ex.id: i for i, ex in enumerate(examples)}
    ranges = [tuple(int(x) for x in r.split(":")) for r in args.critic_range]
    todo = examples[args.offset :]
    program = rt.system("sharp", {})
    record(program, todo, args.out, critique=lambda ex: any(a <= position[ex.id] < b for a, b in ranges))


if __name__ == "__main__":
    main()
