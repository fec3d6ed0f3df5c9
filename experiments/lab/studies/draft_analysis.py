"""What a recording of SHARP's rounds says about its levers, before any policy is tuned.

    python -m experiments.lab.studies.draft_analysis --dataset hotpotqa --split train \\
        --recording workspace/recordings/hotpotqa-train.jsonl [--json OUT]

Per question form and per round (draft, re-retrieval, comparison, focused read), settled as a program settles
them (``--program``, default the uncompiled SHARP): how many rounds, their EM, and what an oracle choosing
the best round would score; how often a repair fixes or breaks the draft; and the AUROC of single features
against "the round is right" (what the answer critic can build on). Read from the recording only: no LM
call.
"""

from __future__ import annotations

import argparse
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from experiments.lab.studies import show
from experiments.runtime import Runtime
from optimize.gate_fitting import round_cases
from optimize.metrics import auroc
from optimize.recording import _read
from program.sharp.gate import CRITIC_FEATURES, GATE_FEATURES


def analyse(records: dict[str, dict], examples: list, policy: Any, passages: Any) -> dict:
    by_id = {ex.id: ex for ex in examples}
    cases = round_cases(records, [by_id[i] for i in records if i in by_id], policy, passages)
    rounds: dict[tuple[str, str], list[float]] = defaultdict(list)
    per_q: dict[str, dict[str, dict]] = defaultdict(dict)
    for c in cases:
        rounds[(c["form"], c["action"])].append(float(c["label"]))
        per_q[c["question_id"]][c["action"]] = c
    out: dict = {"questions": len(per_q), "drafts": len(cases), "rounds": {}, "repairs": {}, "oracle": {}, "auroc": {}}
    for (form, action), labels in sorted(rounds.items()):
        out["rounds"][f"{form}/{action}"] = {"n": len(labels), "em": round(sum(labels) / len(labels), 3)}
    forms: dict[str, list[dict]] = defaultdict(list)
    for acts in per_q.values():
        forms[acts["draft"]["form"] if "draft" in acts else "?"].append(acts)
    for form, qs in [*forms.items(), ("all", [a for v in forms.values() for a in v])]:
        draft = [float(a["draft"]["label"]) for a in qs if "draft" in a]
        oracle = [float(any(c["label"] for c in a.values())) for a in qs]
        out["oracle"][form] = {
            "n": len(qs),
            "draft_em": round(sum(draft) / max(1, len(draft)), 3),
            "best_round_em": round(sum(oracle) / max(1, len(oracle)), 3),
        }
        for action in ("retrieve", "compare", "focus"):
            pairs = [(a["draft"]["label"], a[action]["label"]) for a in qs if "draft" in a and action in a]
            if pairs:
                out["repairs"][f"{form}/{action}"] = {
                    "n": len(pairs),
                    "fixes": sum(1 for d, r in pairs if not d and r),
                    "breaks": sum(1 for d, r in pairs if d and not r),
                }
    labels = [c["label"] for c in cases]
    for f in GATE_FEATURES:
        vals = [c["features"][f] for c in cases]
        out["auroc"][f] = _auroc(vals, labels)
    critiqued = [c for c in cases if c["critic"] is not None]
    for f in CRITIC_FEATURES:
        out["auroc"][f] = _auroc([c["critic"][f] for c in critiqued], [c["label"] for c in critiqued])
    out["auroc"]["lp_mean (critiqued drafts)"] = _auroc(
        [c["features"]["lp_mean"] for c in critiqued], [c["label"] for c in critiqued]
    )
    out["critiqued_drafts"] = len(critiqued)
    return out


def _auroc(values: list[float], labels: list[bool]) -> float | None:
    v = auroc([x for x, y in zip(values, labels) if y], [x for x, y in zip(values, labels) if not y])
    return None if v is None else round(v, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--json", type=Path, default=None, help="also write the analysis here")
    ap.add_argument("--program", type=Path, default=None, help="settle rounds as this program does")
    ap.add_argument("--offset", type=int, default=0, help="skip the first N seeded questions")
    ap.add_argument("--n", type=int, default=None, help="questions after the offset (default: all recorded)")
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    program = rt.load_program(args.program)[0] if args.program else rt.system("sharp", {})
    limit = None if args.n is None else args.offset + args.n
    examples = rt.examples(args.split, limit=limit)[args.offset :]
    out = analyse(_read(args.recording), examples, program.config, rt.passages())
    show(out, args.json)


if __name__ == "__main__":
    main()
