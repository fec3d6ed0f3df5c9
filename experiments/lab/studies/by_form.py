"""EM per question form (bridge, comparison, yes/no) and EM where every gold paragraph was in the evidence,
for several systems' result files on the questions they all answered.

    python -m experiments.lab.studies.by_form --dataset hotpotqa --split dev \\
        "plain RAG=experiments/results/hotpotqa-dev-200/vanilla.jsonl" \\
        "SHARP=experiments/results/hotpotqa-dev-200-answer/sharp.jsonl" [--json OUT]

The form is read from the question (program/sharp/forms.py), so compact result files of any run serve (they keep
the question id, EM and all-gold). Each cell is computed on the questions every file holds, so the columns
compare the same questions; paired differences against the first file come with a bootstrap 95% CI. Each cell also
holds the share of its questions whose answer's evidence held every gold paragraph (for a chain: the union of its
hops' passages), the passages that evidence held (rows written since they keep ``n_passages``; None before), LM
calls and seconds a question; ``ids`` lists the questions of each form; ``command`` the command that wrote it.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from experiments.lab.studies import show
from experiments.runtime import Runtime
from optimize.evaluate import read_results
from optimize.stats import paired_bootstrap
from program.sharp.forms import FORMS, question_form


def table(files: dict[str, list[dict]], forms: dict[str, str]) -> dict:
    rows = {label: {r["id"]: r for r in rs if r.get("error") is None} for label, rs in files.items()}
    common = sorted(set.intersection(*(set(r) for r in rows.values())) & set(forms))
    base = next(iter(rows))
    out: dict = {"questions": len(common), "systems": {}}
    groups = {f: [i for i in common if forms[i] == f] for f in FORMS}
    out["ids"] = {f: ids for f, ids in groups.items()}
    groups["all"] = common
    complete = [i for i in common if all(rows[label][i].get("all_gold") for label in rows)]
    for label, by_id in rows.items():
        cells: dict = {}
        for name, ids in groups.items():
            cells[name] = {**_cell(by_id, rows[base], ids, label != base), **_reads(by_id, ids)}
        base_s = _mean([float(rows[base][i].get("seconds") or 0.0) for i in common])
        if base_s:
            cells["seconds_ratio"] = round(_mean([float(by_id[i].get("seconds") or 0.0) for i in common]) / base_s, 2)
        own = [i for i in common if by_id[i].get("all_gold")]
        cells["all_gold_own"] = {"n": len(own), "em": _em(by_id, own)}
        cells["all_gold_for_all"] = _cell(by_id, rows[base], complete, label != base)
        out["systems"][label] = cells
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def passages_read(row: dict) -> float | None:
    """The passages a row's evidence held (None for a row written before rows kept ``n_passages``)."""
    return float(row["n_passages"]) if row.get("n_passages") is not None else None


def _reads(by_id: dict, ids: list[str]) -> dict:
    """Gold complete, passages, LM calls and seconds a question over ``ids``."""
    if not ids:
        return {}
    counts = [c for i in ids if (c := passages_read(by_id[i])) is not None]
    return {
        "gold_complete": round(_mean([float(by_id[i].get("all_gold") or 0.0) for i in ids]), 3),
        "passages": round(_mean(counts), 2) if counts else None,
        "lm_calls": round(_mean([float(by_id[i].get("lm_calls") or 0.0) for i in ids]), 2),
        "seconds": round(_mean([float(by_id[i].get("seconds") or 0.0) for i in ids]), 2),
    }


def _em(by_id: dict, ids: list[str]) -> float | None:
    return round(sum(float(by_id[i]["em"]) for i in ids) / len(ids), 3) if ids else None


def _cell(by_id: dict, base: dict, ids: list[str], paired: bool) -> dict:
    cell: dict = {"n": len(ids), "em": _em(by_id, ids)}
    if paired and ids:
        diff = paired_bootstrap({i: float(by_id[i]["em"]) for i in ids}, {i: float(base[i]["em"]) for i in ids})
        if diff is not None:
            cell["delta_em"] = [round(diff["diff"], 3), round(diff["ci"][0], 3), round(diff["ci"][1], 3)]
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="dev")
    ap.add_argument("files", nargs="+", help="LABEL=RESULTS.jsonl, the first is the baseline of the differences")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    forms = {ex.id: question_form(ex.question) for ex in rt.examples(args.split)}
    files = {}
    for spec in args.files:
        label, _, path = spec.partition("=")
        files[label] = read_results(Path(path))
    command = "python -m experiments.lab.studies.by_form " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    show({"command": command, **table(files, forms)}, args.json)  # the file says how it is made again


if __name__ == "__main__":
    main()
