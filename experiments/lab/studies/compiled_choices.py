"""What the compiler chose for each program: one column a program (e.g. the 1.5B's and the 0.5B's builds of one
corpus), one row a choice: the accept thresholds, the repairs of each form and their cap, how the answer is
chosen, the rules code applies to the reads, the gate's features and held-out AUROC, and the held-out figures
its manifest entry records. Shows whether a build adapts to its model or copies another's.

    python -m experiments.lab.studies.compiled_choices program/compiled/sharp-2wikimultihopqa.json \\
        program/compiled/sharp-2wikimultihopqa-qwen2.5-coder-0.5b.json [--markdown OUT.md] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.lab.studies import show

CHOICES = (
    "accept_threshold",
    "accept_comparison",
    "accept_yesno",
    "max_repairs",
    "repair_bridge",
    "repair_comparison",
    "repair_yesno",
    "focus_when",
    "choose",
    "yes_threshold",
    "yes_threshold_sub",
    "compare_by",
    "option_form",
    "force_option",
    "span_rule",
)
FIGURES = (
    "gate_auroc_heldout",
    "heldout_em_draft",
    "heldout_em_program",
    "heldout_lm_calls_per_q",
    "heldout_questions",
)


def _cell(value: Any, missing: str = "off") -> str:
    """A choice left None is off (no sub-question threshold); a figure left None was not recorded ("n/a")."""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return missing if value is None else str(value)


def choices(path: Path) -> dict[str, Any]:
    """One program's choices and figures (its manifest entry's, where it is shipped beside one)."""
    body = json.loads(path.read_text())
    config, gate = body["config"], body["config"].get("gate") or {}
    model = (body.get("lm", {}).get("default") or {}).get("model", "?")
    manifest = path.parent / "MANIFEST.json"
    entry = next((e for e in json.loads(manifest.read_text())["programs"].values() if e.get("file") == path.name),
                 {}) if manifest.is_file() else {}  # fmt: skip
    return {
        "model": model,
        **{k: config.get(k) for k in CHOICES},
        "gate_features": gate.get("features") or [],
        "gate_fitted_on": {k: gate.get("fitted_on", {}).get(k) for k in ("n_train", "n_heldout", "cases")},
        **{k: (entry.get("figures") or {}).get(k) for k in FIGURES},
    }


def markdown(table: dict[str, dict]) -> str:
    names = list(table)
    rows = ["| choice | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in ("model", *CHOICES, "gate_features", *FIGURES):
        missing = "n/a" if key in FIGURES else "off"
        rows.append(f"| {key} | " + " | ".join(_cell(table[n].get(key), missing) for n in names) + " |")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="+", type=Path)
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    table = {p.stem: choices(p) for p in args.programs}
    text = markdown(table)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    print(text)
    if args.json:
        show(table, args.json)


if __name__ == "__main__":
    main()
