"""The build of a model that returns no token log-probabilities, measured at no model cost: a committed recording
of the 1.5B's train rounds built twice by replay, as recorded and with every read's log-probabilities removed
(its answer tokens' confidence and its first token's alternatives, so P(yes) too), as `sharp build` builds for a
model without them. Reports, for each: the gate's features and its AUROC on the held-out questions' rounds, and
the held-out EM of the draft alone and of the built program.

    python -m experiments.lab.studies.gate_without_logprobs --dataset 2wikimultihopqa --heldout 130 --trials 200 \\
        --space experiments/spaces/compare-focus.yaml \\
        --recording experiments/results/recordings/2wikimultihopqa-train.jsonl.gz \\
        --json experiments/results/reading/gate-without-logprobs-2wikimultihopqa.json

Each build runs in a workspace of its own under --out (the index linked from --workspace); no LM is called (a
round the recording lacks is an error).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
from pathlib import Path
from typing import Any

from experiments.lab.studies import show

VARIANTS = ("as recorded", "without log-probabilities")


def strip_logprobs(record: dict) -> dict:
    """``record`` as a model without token log-probabilities would have left it: every read's confidence and
    first-token alternatives gone."""

    def bare(read: Any) -> Any:
        return {**read, "confidence": None, "top": None} if isinstance(read, dict) else read

    rounds = []
    for rnd in record.get("rounds") or []:
        rnd = {**rnd, "read": bare(rnd.get("read"))}
        for key in ("values", "hops"):
            if rnd.get(key):
                rnd[key] = [bare(r) for r in rnd[key]]
        rounds.append(rnd)
    return {**record, "rounds": rounds}


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [line for line in fh.read().splitlines() if line.strip()]


def build(
    args: argparse.Namespace, variant: str, *, folder: str | None = None, strip: bool | None = None, extra: tuple = ()
) -> dict:
    """One replayed build of ``variant`` in ``args.out / folder``, its recording's log-probabilities removed where
    ``strip`` (by default: the variants after the first), ``extra`` added to `sharp build`'s arguments: its
    held-out figures, gate features and policy."""
    from typer.testing import CliRunner

    import optimize.recording
    from experiments.cli import app

    strip = variant != VARIANTS[0] if strip is None else strip
    ws = args.out / (folder or ("logprobs" if variant == VARIANTS[0] else "no-logprobs"))
    index = ws / "indexes" / args.dataset
    if not index.exists():
        index.parent.mkdir(parents=True, exist_ok=True)
        index.symlink_to((args.workspace / "indexes" / args.dataset).resolve())
    recording = ws / "recordings" / f"{args.dataset}-train.jsonl"
    recording.parent.mkdir(parents=True, exist_ok=True)
    lines = _lines(args.recording)
    if strip:
        lines = [json.dumps(strip_logprobs(json.loads(line))) for line in lines]
    recording.write_text("\n".join(lines) + "\n")

    def no_lm(*a: Any, **k: Any) -> Any:
        raise RuntimeError("the recording lacks a round: this study calls no LM")

    optimize.recording.record_question = no_lm
    command = ["build", "--dataset", args.dataset, "--workspace", str(ws), "--heldout", str(args.heldout),
               "--trials", str(args.trials), "--no-ship", "--tracking-uri", f"sqlite:///{ws / 'mlflow.db'}"]  # fmt: skip
    if args.space:
        command += ["--space", str(args.space)]
    res = CliRunner().invoke(app, [*command, *extra])
    if res.exit_code != 0:
        raise SystemExit(f"the {variant} build failed:\n{res.output[-3000:]}")
    folder = ws / "builds" / f"sharp-{args.dataset}"
    heldout = json.loads((folder / "heldout.json").read_text())
    program = json.loads((ws / "programs" / f"sharp-{args.dataset}.json").read_text())
    gate = program["config"]["gate"] or {}
    return {
        "gate_features": gate.get("features"),
        "gate_auroc_heldout": heldout["critic"]["all"]["auroc"],
        "gate_auroc_ci": heldout["critic"]["all"]["auroc_ci"],
        "gate_drafts_heldout": heldout["critic"]["all"]["drafts"],
        "heldout_em_draft": heldout["policy"]["all"]["em draft only"],
        "heldout_em_program": heldout["policy"]["all"]["em program"],
        "heldout_delta_em": heldout["policy"]["all"]["delta_em"],
        "heldout_lm_calls_per_q": heldout["policy"]["lm_calls_per_q"]["program"],
        "yes_threshold": program["config"]["yes_threshold"],
        "repairs": {f: program["config"][f"repair_{f}"] for f in ("bridge", "comparison", "yesno")},
        "max_repairs": program["config"]["max_repairs"],
    }


def study_arguments(doc: str, trials: int, out: str) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The arguments of a study that builds one recording by replay in variants (this one, gate_hop_features),
    logging set up, and the head of its report."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--heldout", type=int, required=True)
    ap.add_argument("--trials", type=int, default=trials)
    ap.add_argument("--space", type=Path, default=None)
    ap.add_argument("--recording", type=Path, required=True, help="a committed recording (.jsonl or .jsonl.gz)")
    ap.add_argument("--workspace", type=Path, default=Path("workspace"), help="where the dataset's index is")
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.out = args.out / args.dataset
    head = {"dataset": args.dataset, "heldout": args.heldout, "trials": args.trials, "space": str(args.space),
            "recording": str(args.recording)}  # fmt: skip
    return args, head


def main() -> None:
    args, out = study_arguments(__doc__, 200, "workspace/studies/gate-without-logprobs")
    out.update({variant: build(args, variant) for variant in VARIANTS})
    show(out, args.json)


if __name__ == "__main__":
    main()
