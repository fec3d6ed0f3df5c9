"""The hop planner's plans of the first train bridges no rule plans, beside the check's verdict and the gold
decomposition (what `sharp compile --target planner` scores, one plan a line: what the planner writes).

    python -m experiments.lab.studies.planner_samples --dataset musique \\
        --program workspace/programs/sharp-musique-planner-labeled.json --n 8 \\
        > experiments/results/chain/planner-musique-labeled-samples.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.runtime import Runtime
from optimize.planner import PlannerStudent, plannable
from program.lm.roles import assign_lms
from program.sharp.plans import check_plan


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--program", type=Path, required=True)
    ap.add_argument("--n", type=int, default=8, help="the first N plannable train bridges (seeded order)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args(argv)
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    program, _ = rt.load_program(args.program)
    student = PlannerStudent(program.hop_planner, program.config)
    assign_lms(student, rt.lm_config)
    for ex in plannable(rt.examples("train", seed=args.seed))[: args.n]:
        hops = list(student(question=ex.question).hops)
        row = {
            "q": ex.question,
            "hops": hops,
            "why": check_plan(hops, ex.question),
            "gold": [h for h, _ in ex.gold_hops],
        }
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
