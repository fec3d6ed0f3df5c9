"""The data package imports only program's value types (see DESIGN.md, layering)."""

from __future__ import annotations

import ast
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"
FORBIDDEN = ("optimize", "experiments", "mlflow", "optuna")


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_data_does_not_import_upper_layers():
    for path in DATA.glob("*.py"):
        assert not imported_roots(path) & set(FORBIDDEN), path
