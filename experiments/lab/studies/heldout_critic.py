"""A compiled program's answer critic and policy on recorded questions it was neither fitted nor tuned on.

    python -m experiments.lab.studies.heldout_critic --dataset hotpotqa --split train --offset 477 --n 100 \\
        --program program/compiled/sharp-hotpotqa.json \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

Read from the recording only (no LM call; a question the recording lacks is an error). Reports what
optimize/heldout.py computes (`sharp build`'s held-out check):

- the gate's calibrated P(right) on every recorded draft of those questions (each round's answer is a
  draft the gate may judge): AUROC with a bootstrap 95% CI over questions, Brier, ECE, and the over- and
  under-trigger at each form's accept threshold; and, where the rounds were critiqued, the critic's own
  P(supported) on the same drafts;
- the draft alone (one ranked read, no critic: plain RAG over the ranker) against the program's policy, replayed: EM per question form, EM where
  every gold paragraph was in the evidence, LM calls, with the paired difference and its CI.
"""

from __future__ import annotations

from experiments.lab.studies import recording_study
from optimize.heldout import critic_report, policy_report

__all__ = ["critic_report", "main", "policy_report"]


def main() -> None:
    recording_study(
        __doc__,
        "train",
        lambda program, records, examples, passages, seed: {
            "critic": critic_report(program, records, examples, seed, passages),
            "policy": policy_report(program, records, examples, seed, passages),
        },
    )


if __name__ == "__main__":
    main()
