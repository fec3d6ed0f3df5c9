"""The layers stand: program/ is free of tooling; data/ and optimize/ do not import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "program": {"mlflow", "optuna", "optimize", "experiments", "data"},
    "data": {"mlflow", "optuna", "optimize", "experiments"},
    "optimize": {"mlflow", "experiments", "data"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_layer_crossing(package):
    bad = {}
    for path in (ROOT / package).rglob("*.py"):
        crossing = imported_roots(path) & FORBIDDEN[package]
        if crossing:
            bad[str(path.relative_to(ROOT))] = sorted(crossing)
    assert not bad, f"{package}/ imports layers above it: {bad}"


def test_the_checker_sees_an_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import mlflow\nfrom optimize.metrics import answer_em\n")
    assert imported_roots(f) == {"mlflow", "optimize"}
