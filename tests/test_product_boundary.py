"""The product stands without the lab: nothing in program/, optimize/, data/ or experiments/ (outside
experiments/lab, which holds the benchmarks and the design studies) imports a benchmark or a study, or runs
one by module name (a docstring may name one); and the lab is left out of the installed package."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("program", "optimize", "data", "experiments")
SCRIPTS = ("experiments.lab",)
SCRIPT_DIRS = tuple(ROOT / Path(*s.split(".")) for s in SCRIPTS)
# a module path inside a string: experiments.lab.studies.x or experiments/lab/studies/x.py
NAMED = re.compile(r"experiments[./]lab(?:[./]\w+)*")


def _is_script(module: str) -> bool:
    return any(module == s or module.startswith(s + ".") for s in SCRIPTS)


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }


def script_uses(path: Path, package: str) -> list[str]:
    """Imports of the lab (a benchmark or a study) in ``path`` (a module of ``package``): absolute, relative,
    ``from experiments import lab``; and strings other than docstrings naming one
    (``python -m experiments.lab.studies.x``, ``importlib.import_module``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_script(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            found += [f"{base}.{a.name}" for a in node.names if _is_script(f"{base}.{a.name}")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found += [m.removesuffix(".py").replace("/", ".") for m in NAMED.findall(node.value)]
    return sorted(set(found))


def product_files() -> list[tuple[Path, str]]:
    out = []
    for top in PRODUCT:
        for p in (ROOT / top).rglob("*.py"):
            if any(d in p.parents for d in SCRIPT_DIRS):
                continue
            out.append((p, ".".join(p.relative_to(ROOT).parts[:-1])))
    return out


def test_the_product_imports_no_benchmark_and_no_study():
    bad = {str(p.relative_to(ROOT)): uses for p, pkg in product_files() if (uses := script_uses(p, pkg))}
    assert not bad, f"product modules reach into the lab: {bad}"


def test_the_checker_sees_every_spelling(tmp_path):
    f = tmp_path / "x.py"
    f.write_text(
        '"""Measured by experiments/lab/studies/embedding.py (a docstring may say so)."""\n'
        "import experiments.lab.studies.loop_analysis\n"
        "from experiments.lab.benchmarks import retrieval\n"
        "from experiments import lab\n"
        "from ..lab.benchmarks.suite import main\n"
        "from experiments.reports.summary import markdown\n"
        "CMD = ['python', '-m', 'experiments.lab.benchmarks.suite']\n"
        "NOTE = 'see experiments/lab/studies/second_hop.py'\n"
        "def f():\n"
        "    '''Also fine: experiments.lab.studies.record_loop.'''\n"
    )
    assert script_uses(f, "experiments.commands") == [
        "experiments.lab",
        "experiments.lab.benchmarks.retrieval",
        "experiments.lab.benchmarks.suite",
        "experiments.lab.benchmarks.suite.main",
        "experiments.lab.studies.loop_analysis",
        "experiments.lab.studies.second_hop",
    ]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_the_lab_is_left_out_of_the_installed_package():
    import tomllib
    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = set(find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ())))
    assert {"program", "optimize", "data", "experiments", "experiments.commands"} <= packages
    assert not [p for p in packages if p == "experiments.lab" or p.startswith("experiments.lab.")]
