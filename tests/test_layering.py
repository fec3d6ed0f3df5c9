"""The layers stand: program/ is free of tooling; data/ and optimize/ do not import each other."""

from __future__ import annotations

import ast
import importlib
import importlib.util
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


def private_uses(path: Path) -> list[str]:
    """What ``path`` takes from ``program`` beyond its public API: a name with a leading underscore, or
    one left out of the ``__all__`` of a module that declares one (a submodule of a package is fine)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "program":
            module = importlib.import_module(node.module)
            public = getattr(module, "__all__", None)
            for alias in node.names:
                submodule = hasattr(module, "__path__") and importlib.util.find_spec(f"{node.module}.{alias.name}")
                if (alias.name.startswith("_") or (public is not None and alias.name not in public)) and not submodule:
                    bad.append(f"from {node.module} import {alias.name}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and ast.unparse(node.value).split(".")[0] == "program"
        ):
            bad.append(ast.unparse(node))
    return bad


@pytest.mark.parametrize("package", ["optimize", "data", "experiments"])
def test_the_layers_above_use_only_program_s_public_api(package):
    bad = {str(p.relative_to(ROOT)): private_uses(p) for p in (ROOT / package).rglob("*.py")}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{package}/ reaches into program's internals: {bad}"


def test_the_checker_sees_a_private_use(tmp_path):
    f = tmp_path / "x.py"
    f.write_text(
        "import program.sharp\nfrom program.sharp import SharpConfig, _terms, Run\nfrom program import saved\n"
        "program.sharp._WORD\n"
    )
    assert private_uses(f) == [
        "from program.sharp import _terms",
        "from program.sharp import Run",
        "program.sharp._WORD",
    ]
