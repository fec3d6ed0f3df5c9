"""The bench report: sections of rows, each figure divided by its baseline row's, measured in the same run.

A :class:`Section` holds rows (a name and figures); one row is the baseline. :meth:`Section.to_dict`
adds to every row ``ratio`` = {figure: row's value / baseline's value} for the section's compared
figures, so no ratio is ever copied from another run. A section that could not run is kept with its
status (``skipped``: a precondition is missing, e.g. no trained reranker or no ``chroma`` command;
``failed``: it raised) and the reason, so the report always has every section.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, SKIPPED, FAILED = "ok", "skipped", "failed"


@dataclass
class Section:
    key: str
    title: str
    # figure -> unit, in display order; the ratios are computed for ``compared``
    figures: dict[str, str]
    compared: tuple[str, ...]
    baseline: str = ""
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = OK
    reason: str | None = None
    seconds: float | None = None

    def add(self, name: str, **figures: Any) -> dict:
        row = {"name": name, **figures}
        self.rows.append(row)
        return row

    def skip(self, reason: str) -> Section:
        self.status, self.reason = SKIPPED, reason
        return self

    def fail(self, reason: str) -> Section:
        self.status, self.reason = FAILED, reason
        return self

    def baseline_row(self) -> dict | None:
        return next((r for r in self.rows if r["name"] == self.baseline), None)

    def to_dict(self) -> dict:
        base = self.baseline_row()
        rows = []
        for row in self.rows:
            ratio = {}
            for f in self.compared:
                b, v = (base or {}).get(f), row.get(f)
                ratio[f] = (
                    round(v / b, 4) if isinstance(v, (int, float)) and isinstance(b, (int, float)) and b else None
                )
            rows.append({**row, "ratio": ratio})
        return {
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "baseline": self.baseline,
            "figures": self.figures,
            "compared": list(self.compared),
            "rows": rows,
            "notes": self.notes,
            "seconds": self.seconds,
        }


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# SHARP bench",
        "",
        f"{m['cpus']} CPU cores, {m['platform']}; Python {m['python']}. Generated {report['generated_at']} by "
        f"`{report['command']}`{' (quick mode)' if report['quick'] else ''} in {report['seconds']:.0f} s.",
        "",
        "Every ratio divides a row's figure by the baseline row's figure of the same section, both measured "
        "in this run; compare ratios, not absolute figures, across machines.",
        "",
    ]
    for key, s in report["sections"].items():
        lines += [f"## {s['title']}", ""]
        if s["status"] != OK:
            lines += [f"**{s['status']}**: {s['reason']}", ""]
            if not s["rows"]:
                continue
        figs = list(s["figures"])
        head = ["row", *[f"{f} ({u})" if u else f for f, u in s["figures"].items()]]
        head += [f"{f} / baseline" for f in s["compared"]]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in s["rows"]:
            name = f"{r['name']} (baseline)" if r["name"] == s["baseline"] else r["name"]
            cells = [name, *[_cell(r.get(f)) for f in figs], *[_cell(r["ratio"].get(f)) for f in s["compared"]]]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines += [f"- {n}" for n in s["notes"]]
        if s["notes"]:
            lines.append("")
        if s.get("seconds") is not None:
            lines += [f"Section `{key}` measured in {s['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def write(report: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "bench.json", out_dir / "bench.md"
    js.write_text(json.dumps(report, indent=2, default=str))
    md.write_text(markdown(report))
    return js, md
