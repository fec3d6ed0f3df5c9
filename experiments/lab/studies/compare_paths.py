"""Which path decided each recorded comparison read: code over parsed values, the composer LM, or an option.

    python -m experiments.lab.studies.compare_paths --dataset hotpotqa --split train --n 448 \\
        --program PROGRAM --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

Reads the recording only (no LM call). Every comparison question among the N seeded questions after --offset
is sent to its recorded `compare` read (whatever the program's gate would accept), settled by the program's
rules: how many reads settled an answer (a read that settles none leaves the draft's), and per path (the
round's `how`) how many and how many right (EM 1).
"""

from __future__ import annotations

from collections import Counter

from experiments.lab.studies import recording_study
from optimize.gate_fitting import round_cases


def compare_paths(program, records, examples, passages, seed) -> dict:
    comparisons = [ex for ex in examples if records[ex.id]["form"] == "comparison"]
    every = program.config.replace(accept_comparison=1.0, repair_comparison=("compare",),
                                   max_repairs=max(1, program.config.max_repairs))  # fmt: skip
    cases = [c for c in round_cases(records, comparisons, every, passages) if c["action"] == "compare"]
    rounds, right = Counter(c["how"] for c in cases), Counter(c["how"] for c in cases if c["label"])
    return {
        "comparisons": len(comparisons),
        "with a compare answer": len({c["question_id"] for c in cases}),
        "paths": {how: {"rounds": n, "right": right[how]} for how, n in sorted(rounds.items())},
    }


def main() -> None:
    recording_study(__doc__, "train", compare_paths)


if __name__ == "__main__":
    main()
