"""`sharp ship`'s check, per question form: a new program against the shipped one on held-out train questions.

    python -m experiments.lab.studies.ship_check_by_form --dataset hotpotqa --offset 448 --n 150 \\
        --new experiments/results/programs/sharp-hotpotqa-reading-refused.json \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

Each program is replayed over a recording of its own reading, as the ship check does (the new one over
``--recording``; the shipped one over the workspace file the check wrote, ``ship-KEY.jsonl``, recording what
it lacks, which needs the LM). Reports EM, F1 and LM calls of each, and per form (the recording's) the paired
difference with its bootstrap 95% CI.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.lab.studies import rounded_diff, show


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it lies under it (no machine paths in results)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--offset", type=int, required=True, help="the first held-out seeded train question")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--new", type=Path, required=True, help="the program `sharp ship` was asked to ship")
    ap.add_argument("--recording", type=Path, required=True, help="the new program's recording")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()

    from experiments.runtime import Runtime
    from experiments.ship import score_on
    from optimize import recording
    from optimize.stats import paired_bootstrap
    from program import shipped
    from program.forms import FORMS

    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    examples = rt.examples("train", limit=args.offset + args.n, seed=args.seed)[args.offset :]
    current = shipped.COMPILED_DIR / f"sharp-{args.dataset}.json"
    out: dict = {"positions": f"train {args.offset}:{args.offset + len(examples)} (seed {args.seed})"}
    rows = {}
    for label, path, where in (("new", args.new, args.recording), ("shipped", current, None)):
        module, _ = rt.load_program(path)
        where = where or rt.workspace / "recordings" / f"ship-{recording.reading_key(module, examples)}.jsonl"
        result = score_on(rt, module, examples, Path(where))
        rows[label] = {r["id"]: float(r["em"]) for r in result.rows}
        out[label] = {"program": _shown(path), "em": round(result.metrics["em"], 3), "f1": round(result.metrics["f1"], 3),
                      "lm_calls_per_q": round(result.metrics["lm_calls_per_q"], 2), "recording": str(where)}  # fmt: skip
    records = recording.read_records(args.recording, examples)
    forms = {ex.id: records[ex.id]["form"] for ex in examples}
    for form in ("all", *FORMS):
        ids = [i for i in rows["new"] if form == "all" or forms[i] == form]
        if ids:
            em = {label: {i: r[i] for i in ids} for label, r in rows.items()}
            out[form] = {
                "questions": len(ids),
                **{f"em {label}": round(sum(v.values()) / len(ids), 3) for label, v in em.items()},
                "delta_em": rounded_diff(paired_bootstrap(em["new"], em["shipped"], seed=args.seed)),
            }
    show(out, args.json)


if __name__ == "__main__":
    main()
