"""`sharp ship`'s check, per question form: a new program against the shipped one on held-out train questions.

    python -m experiments.lab.studies.ship_check_by_form --dataset hotpotqa --offset 448 --n 150 \\
        --new experiments/results/programs/sharp-hotpotqa-reading-refused.json \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

The ship check itself (experiments.jobs.ship.ship_check, grouped by the recording's question forms): each program
replayed over a recording of its own reading (the new one over ``--recording``; the shipped one over the
workspace file the check wrote, ``ship-KEY.jsonl``, recording what it lacks, which needs the LM). Reports EM
and LM calls of each and the paired difference with its bootstrap 95% CI, overall and per form.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.lab.studies import show


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--offset", type=int, required=True, help="the first held-out seeded train question")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--new", type=Path, required=True, help="the program `sharp ship` was asked to ship")
    ap.add_argument("--recording", type=Path, required=True, help="the new program's recording")
    ap.add_argument("--current", type=Path, default=None, help="the program to compare with (default: the shipped one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()

    from experiments.jobs.ship import kept_path, ship_check
    from experiments.runtime import Runtime
    from optimize import recording
    from program.serving import shipped

    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    examples = rt.examples("train", limit=args.offset + args.n, seed=args.seed)[args.offset :]
    current = args.current or shipped.COMPILED_DIR / f"sharp-{args.dataset}.json"
    records = recording.read_records(args.recording, examples)
    forms = {ex.id: records[ex.id]["form"] for ex in examples}
    check = ship_check(rt, args.new, current, examples, args.recording, args.seed, groups=forms)
    for label, path in (("new", args.new), ("shipped", current)):
        check[label]["program"] = kept_path(path)
    command = (f"python -m experiments.lab.studies.ship_check_by_form --dataset {args.dataset} --offset {args.offset} "
               f"--n {args.n} --new {kept_path(args.new)} --current {kept_path(current)} --recording "
               f"{kept_path(args.recording)}" + (f" --json {kept_path(args.json)}" if args.json else ""))  # fmt: skip
    positions = f"train {args.offset}:{args.offset + len(examples)} (seed {args.seed})"
    show({"command": command, "positions": positions, **check}, args.json)


if __name__ == "__main__":
    main()
