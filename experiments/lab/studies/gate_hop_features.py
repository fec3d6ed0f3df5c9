"""The gate with the chain's hop features among the inputs it may choose, measured at no model cost (issue 38).

    python -m experiments.lab.studies.gate_hop_features --dataset 2wikimultihopqa --heldout 130 --trials 300 \\
        --space experiments/spaces/chain.yaml --recording experiments/results/recordings/2wikimultihopqa-train.jsonl.gz \\
        --json experiments/results/chain/gate-hop-features-2wikimultihopqa.json

`sharp build` fits the gate on one of its candidate feature sets (optimize/gate_fitting.py CANDIDATE_FEATURES),
chosen by question-grouped cross-validation on the tuning questions: the largest set holds every feature, the
hop features among them (a chain round's weakest hop log-probability, a hop answered with the wrong kind of
thing, every later hop reading the passage its earlier answer titles, planned by rule), and the smaller ones
none. Here one recording is built twice by replay, as `sharp build` builds it (`--max-calls 3 --planner-demos
none`, the shipped 2Wiki program's command) and with one more candidate: the set the 2Wiki build chose plus the
hop features. Reports, for each: the features chosen, the gate's AUROC on the held-out questions' rounds, the
held-out EM of the draft and of the built program. No LM is called (a round the recording lacks is an error).
"""

from __future__ import annotations

from experiments.lab.studies import show
from experiments.lab.studies.gate_without_logprobs import build, study_arguments
from optimize import gate_fitting as gf

WITH_HOPS = gf.CONFIDENCE + gf.FORM + gf.EVIDENCE + gf.MISTAKES + gf.CHAIN
VARIANTS = {
    "as sharp build builds": gf.CANDIDATE_FEATURES,
    "with the hop features": (*gf.CANDIDATE_FEATURES, WITH_HOPS),
}


def main() -> None:
    args, out = study_arguments(__doc__, 300, "workspace/studies/gate-hop-features")
    out["hop features"] = list(gf.CHAIN)
    for i, (variant, candidates) in enumerate(VARIANTS.items()):
        gf.CANDIDATE_FEATURES = candidates  # read when the build fits its gate
        out[variant] = build(args, variant, folder=f"variant-{i}", strip=False,
                             extra=("--max-calls", "3", "--planner-demos", "none"))  # fmt: skip
    show(out, args.json)


if __name__ == "__main__":
    main()
