"""Each chain lever alone against the ranked read, on a recording's bridges (replays, no LM call):

    python -m experiments.lab.studies.chain_levers --dataset hotpotqa \\
        --program experiments/results/programs/sharp-hotpotqa-chain-build.json \\
        --recording experiments/results/recordings/hotpotqa-train-chain.jsonl.gz --n 598 \\
        --json experiments/results/chain/chain-levers-hotpotqa-bridges.json

The first ``--n`` seeded train questions, their bridges only (the form the recording holds); each lever of
optimize/levers.py that runs the chain (every bridge, the union read, routed by the draft's P(right), the beam
where the recording holds branches) over the neutral ranked read, with its paired 95% CI, LM calls and recorded
seconds a bridge, and how the recorded chains ended. What a build's policy weighs when it takes or leaves the chain.
Where the recording holds the beam's branches: each chain's last answer against its branch's (right, wrong or
stopped, by gold), the most the beam could add with a perfect choice between them.
"""

from __future__ import annotations

import argparse
from typing import Any

from experiments.lab.studies import show
from experiments.lab.studies.lever_selection import add_arguments, load
from optimize import levers as lv
from optimize.metrics import exact_match, gold_answers


def study(program: Any, records: dict, examples: list, passages: Any, seed: int = 0) -> dict[str, Any]:
    bridges = [ex for ex in examples if records[ex.id]["form"] == "bridge"]
    offered = [lever for lever in lv.levers(program.config) if lever.needs == "chain"]
    chain, unrecorded = lv.replayable(records, bridges, program.config, offered, passages, seed)
    neutral, effects = lv.measure(records, bridges, program.config, chain, passages, seed)
    return {
        "bridges": len(bridges),
        "chains": chain_outcomes(records, bridges),
        "neutral": neutral,
        "levers": {
            e.lever.name: {
                "em": e.em,
                "delta_em": e.delta_em,
                "lm_calls_per_q": e.lm_calls_per_q,
                "seconds_per_q": e.seconds_per_q,
            }
            for e in effects
        },  # fmt: skip
        **({"not replayable (rounds the recording lacks)": unrecorded} if unrecorded else {}),
        **({"branches (the beam)": branches} if (branches := branch_outcomes(records, bridges)) else {}),
    }


def _ended(chain: dict, golds: list[str]) -> str:
    hops, answers = chain["plan"]["hops"] if chain.get("plan") else [], chain.get("hop_answers") or []
    if chain.get("fallback") or not hops or len(answers) < len(hops):
        return "stopped"
    return "right" if exact_match(answers[-1], golds) else "wrong"


def branch_outcomes(records: dict, bridges: list) -> dict[str, Any]:
    """Each recorded chain that has a branch (the beam: hop 1's second answer carried through), its last answer
    and its branch's, each right, wrong (by gold) or stopped; and the most a perfect choice between them adds:
    the chains the branch gets right and the first chain does not."""
    pairs: dict[str, int] = {}
    for ex in bridges:
        golds = gold_answers(ex)
        for rnd in records[ex.id].get("rounds") or []:
            if rnd["action"] == "chain" and rnd.get("branch"):
                key = f"chain {_ended(rnd, golds)}, branch {_ended(rnd['branch'], golds)}"
                pairs[key] = pairs.get(key, 0) + 1
    if not pairs:
        return {}
    mended = sum(v for k, v in pairs.items() if k.endswith("branch right") and not k.startswith("chain right"))
    return {
        "chains with a branch": sum(pairs.values()),
        "pairs": dict(sorted(pairs.items())),
        "the branch right where the chain is not (a perfect choice's gain)": mended,
    }


def chain_outcomes(records: dict, bridges: list) -> dict[str, int]:
    """How the recorded chains of ``bridges`` ended: finished, stopped at a hop, or their plan refused (by why)."""
    out: dict[str, int] = {}
    for ex in bridges:
        for rnd in records[ex.id].get("rounds") or []:
            if rnd["action"] == "chain":
                why = rnd.get("fallback") or ""
                key = ("refused: " + why.split(": ")[1]) if why.startswith("plan refused") else (
                    "a hop stopped it" if why else "finished")  # fmt: skip
                out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--n", type=int, required=True, help="the first N seeded train questions")
    args = ap.parse_args()
    if args.save is not None:
        ap.error("--save: this study measures the chain levers, it keeps none (crossfit_levers --save does)")
    rt, program, _, examples, records = load(args, args.n)
    show({"program": str(args.program), **study(program, records, examples, rt.passages(), args.seed)}, args.json)


if __name__ == "__main__":
    main()
