"""The shipped gates on the held-out train drafts of several corpora at once: one AUROC over all of them.

    python -m experiments.lab.studies.pooled_critic \\
        --part hotpotqa,448,150,program/compiled/sharp-hotpotqa.json,workspace/recordings/hotpotqa-train.jsonl \\
        --part 2wikimultihopqa,334,130,program/compiled/sharp-2wikimultihopqa.json,workspace/recordings/2wikimultihopqa-train.jsonl \\
        [--json OUT]

Each ``--part`` is DATASET,OFFSET,N,PROGRAM,RECORDING: the N seeded train questions after OFFSET, which the
program was neither fitted nor tuned on, read from the recording only (no LM call; a question the recording
lacks is an error). Every answered round is a draft its own program's gate judges; each is accepted or sent
to a repair at its own program's threshold for its form (what the program does; a program that always
decides comparisons in code has threshold 1 there) and, in "all at the gate's threshold", at its program's
general accept threshold. Reports the pooled AUROC
with a bootstrap 95% CI over questions, Brier, ECE, over- and under-trigger, and the same per part and per
form. One corpus alone may hold too few held-out drafts for a tight CI (2Wiki: 192); pooled, the gates are
judged on what a user of the shipped programs meets.

``--refit`` also fits one gate on the rounds of every part's first OFFSET questions (the ones its program was
tuned on, settled by its program's rules) and reports it on the same held-out rounds beside the programs' own
gates: whether one gate over several corpora judges better than each corpus's own.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.lab.studies import program_and_records, show
from optimize.gate_fitting import fit_answer_critic, report, round_cases
from program.sharp.loop import gate_probability


def parse_part(text: str) -> argparse.Namespace:
    """One ``--part`` (DATASET,OFFSET,N,PROGRAM,RECORDING) as the options program_and_records takes."""
    fields = text.split(",")
    if len(fields) != 5:
        raise argparse.ArgumentTypeError(f"--part {text!r}: want DATASET,OFFSET,N,PROGRAM,RECORDING (5 fields)")
    dataset, offset, n, program, recording = fields
    try:
        offset_i, n_i = int(offset), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--part {text!r}: OFFSET and N must be integers") from None
    if offset_i < 0 or n_i <= 0:
        raise argparse.ArgumentTypeError(f"--part {text!r}: OFFSET must be >= 0 and N > 0")
    return argparse.Namespace(dataset=dataset, offset=offset_i, n=n_i, program=Path(program),
                              recording=Path(recording), split="train")  # fmt: skip


def judged(program: Any, records: dict, examples: list, passages: Any, tag: str) -> list[dict]:
    """Every answered round of ``examples`` with its gate's P(right) and its program's threshold; question ids
    prefixed with ``tag`` so that ids from two corpora never meet in the bootstrap."""
    policy = program.config
    cases = round_cases(records, examples, policy, passages)
    for c in cases:
        c["question_id"] = f"{tag}:{c['question_id']}"
        c["p"] = gate_probability(c["features"], policy)
        c["threshold"] = policy.accept_for(c["form"])
        c["gate_threshold"] = policy.accept_threshold
        c["part"] = tag
    return cases


def summarize(cases: list[dict], seed: int) -> dict:
    """The pooled report, then one per part and one per form (where both labels occur)."""

    def rep(group: list[dict]) -> dict:
        return report([c["p"] for c in group], group, [c["threshold"] for c in group], seed)

    out: dict = {"all": rep(cases)}
    out["all at the gate's threshold"] = report(
        [c["p"] for c in cases], cases, [c["gate_threshold"] for c in cases], seed
    )
    for key in ("part", "form"):
        for value in sorted({c[key] for c in cases}):
            group = [c for c in cases if c[key] == value]
            if len({c["label"] for c in group}) == 2:
                out[f"{key} {value}"] = rep(group)
    firsts = [c for c in cases if c["action"] == "draft"]
    if len({c["label"] for c in firsts}) == 2:
        out["first_drafts"] = rep(firsts)
    return out


def refit(fit: list[dict], held: list[dict], seed: int) -> dict:
    """One gate fitted on ``fit`` (the parts' tuning rounds), reported on ``held`` (the judged held-out rounds,
    their thresholds kept): pooled, then per part."""
    gate = fit_answer_critic(fit, [], {"parts": sorted({c["part"] for c in fit})}, seed)["gate"]
    refitted = [dict(c, p=gate.probability(c["features"])) for c in held]
    out = {
        "features": list(gate.features),
        "fitted on": {"drafts": len(fit), "questions": len({c["question_id"] for c in fit})},
    }
    return {**out, **{k: v for k, v in summarize(refitted, seed).items() if k == "all" or k.startswith("part ")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", type=parse_part, action="append", required=True,
                    help="DATASET,OFFSET,N,PROGRAM,RECORDING (repeat for each corpus)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--refit", action="store_true", help="also fit one gate on every part's tuning rounds")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    cases: list[dict] = []
    tuning: list[dict] = []
    parts = []
    for part in args.part:
        part.seed, part.workspace = args.seed, args.workspace
        if args.refit and part.offset == 0:
            raise SystemExit(f"--refit: part {part.dataset} has OFFSET 0, so no tuning questions to fit on")
        # with --refit, one load holds the tuning questions too (0:OFFSET), then the held-out ones
        whole = argparse.Namespace(**{**vars(part), "offset": 0}) if args.refit else part
        program, examples, records, _, passages = program_and_records(
            whole, part.n + (part.offset if args.refit else 0)
        )
        held = examples[-part.n :]
        cases += judged(program, records, held, passages, part.dataset)
        positions = f"{part.split} {part.offset}:{part.offset + len(held)} (seed {part.seed})"
        parts.append({"dataset": part.dataset, "positions": positions, "program": str(part.program)})
        if args.refit:
            tuning += judged(program, records, examples[: part.offset], passages, part.dataset)
    out: dict[str, Any] = {"parts": parts, "critic": summarize(cases, args.seed)}
    if args.refit:
        out["one gate fitted on every part's tuning rounds"] = refit(tuning, cases, args.seed)
    show(out, args.json)


if __name__ == "__main__":
    main()
