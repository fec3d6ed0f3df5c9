"""Migrate a saved SHARP program of code version 0.1.0 (the answer-critic loop of commit 47db07c) to 0.2.0
(typed rounds; the decomposed read became the comparison round, its values decided in code or composed):

    python -m experiments.lab.migrations.program_v1_to_v2 program/compiled/sharp-hotpotqa.json \\
        --out workspace/programs/sharp-hotpotqa-0.1.0.json

What the 0.1.0 program did, kept: its policy (thresholds, repairs per form, the gate and judge, its reading
settings: sub_k, the planner's token cap), the decomposed read as a comparison always composed by the LM
(``compare_by="composer"``, as 0.1.0 composed), no settling rule it did not have (yes/no from the text, the
option and the span as read). Its prompts were the uncompiled signatures (its compile fitted only the critic),
so the program takes this code's signatures; a program with compiled demos or instructions is refused.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from program.errors import ProgramFileError
from program.serving.saved import save_program, without_lms
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig

log = logging.getLogger(__name__)


def migrate_config(config: dict) -> dict:
    out = dict(config)
    out["ask_critic"], out["choose"] = out.pop("critic", "off"), out.pop("select", "confidence")
    for name in ("repair_bridge", "repair_comparison", "repair_yesno"):
        out[name] = ["compare" if a == "decompose" else a for a in out.get(name) or []]
    out.update(compare_by="composer", yes_threshold=None, option_form="question", force_option=False,
               span_rule="off", focus_when="rejected")  # fmt: skip
    return out


def check_uncompiled(state: dict) -> None:
    for name, pred in state.items():
        if pred.get("demos"):
            raise ProgramFileError(f"{name} has compiled demos: recompile the program with this code instead")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    body = json.loads(args.source.read_text())
    if body.get("code_version") != "0.1.0" or body.get("system") != "sharp":
        raise SystemExit(f"{args.source}: not a SHARP program of code version 0.1.0")
    check_uncompiled(body["state"])
    config = SharpConfig.from_mapping(migrate_config(body["config"]))
    module = SharpRAG(retriever=None, config=config)  # type: ignore[arg-type]
    meta = {**body["meta"], "migrated_from": f"code version 0.1.0 ({args.source.name}, commit 47db07c)"}
    save_program(args.out, module, "sharp", body["retriever"], body["lm"], body["index_manifest"], meta)
    log.info("wrote %s (state: %s)", args.out, sorted(without_lms(module.dump_state())))


if __name__ == "__main__":
    main()
