"""Design studies: scripts that measured the choices behind the defaults (not part of the product).

Each module's docstring says what it measured; experiments/findings/ (indexed by experiments/RESULTS.md)
holds the figures and the commands. Left out of the installed package (pyproject.toml); nothing in the
product imports a study (tests/test_product_boundary.py).
"""

import argparse
from pathlib import Path
from typing import Any


def show(out: object, path: "Path | None" = None) -> None:
    """Print a study's result as JSON on stdout and, with ``path``, write it there too."""
    import json
    import sys

    text = json.dumps(out, indent=1, default=str)
    sys.stdout.write(text + "\n")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def add_recording_arguments(ap: "argparse.ArgumentParser", split: str) -> None:
    """The options of a study that replays a saved program over a recording of its rounds: the dataset and
    split, the seeded questions' offset and seed, the program, the recording, where to write, the workspace."""
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default=split)
    ap.add_argument("--offset", type=int, default=0, help="skip the first N seeded questions (held-out train)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--program", type=Path, default=None, help="a saved program (default: the uncompiled SHARP)")
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))


def program_and_records(
    args: "argparse.Namespace",
    n: int,
    critique: "bool | None" = None,
    actions: "tuple[str, ...] | None" = None,
    focus_when: str = "flagged",
) -> tuple:
    """(program, examples, records, positions, passages) for ``n`` seeded questions after ``args.offset``
    (``passages``: the index's text for recorded passages, program.sharp.rounds.PassageLookup). ``critique``
    None reads the recording only (a missing question is an error); True/False records what it lacks, with or
    without critiques: the repairs in ``actions`` (None: every one), focused reads as ``focus_when`` says.
    The records must come from a program that reads like this one."""
    import logging

    from experiments.runtime import Runtime
    from optimize import recording

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    program = rt.load_program(args.program)[0] if args.program else rt.system("sharp", {})
    passages = rt.passages()
    examples = rt.examples(args.split, limit=args.offset + n, seed=args.seed)[args.offset :]
    if critique is None:
        records = recording.read_records(args.recording, examples)
    else:
        records = recording.record(
            program, examples, args.recording, critique=critique, passages=passages, actions=actions,
            focus_when=focus_when,
        )  # fmt: skip
    recording.check_reading(records.values(), program, actions)
    positions = f"{args.split} {args.offset}:{args.offset + len(examples)} (seed {args.seed})"
    return program, examples, records, positions, passages


def recording_study(doc: str, split: str, study: "Any", actions: "tuple[str, ...] | None" = None) -> None:
    """The main of a study over recorded questions: its options (:func:`add_recording_arguments` and ``--n``),
    the program and records, then ``study(program, records, examples, passages, seed)``'s output shown with
    the questions and their positions."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recording_arguments(ap, split=split)
    ap.add_argument("--n", type=int, required=True, help="questions (after --offset)")
    args = ap.parse_args()
    program, examples, records, positions, passages = program_and_records(args, args.n, actions=actions)
    out = {"questions": len(examples), "positions": positions, "program": str(args.program)}
    show({**out, **study(program, records, examples, passages, args.seed)}, args.json)


def rounded_diff(diff: "dict | None") -> "list[float] | None":
    """A paired bootstrap's difference and 95% CI, rounded to 3 places (None: too few questions)."""
    return [round(diff["diff"], 3), round(diff["ci"][0], 3), round(diff["ci"][1], 3)] if diff else None
