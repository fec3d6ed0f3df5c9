"""The layers stand (ARCHITECTURE.md, "Layers"): program/ is free of tooling; data/ and optimize/ do not import
each other; data/ takes from program/ only its value types, its errors and the retriever's building blocks;
the composition root (experiments/ outside experiments/lab) never imports the lab."""

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


def imported_names(path: Path, package: str) -> set[str]:
    """What ``path`` (a module of ``package``) imports, by full dotted name, relative imports resolved:
    ``import a.b`` gives ``a.b``; ``from a.b import c`` gives ``a.b.c`` (c a submodule or a name in a.b)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names |= {base if a.name == "*" else f"{base}.{a.name}" for a in node.names}
    return names


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# data/ builds the indexes the retriever reads (BM25 files, the dense store, the manifest and its checksums),
# so it uses the retriever's building blocks (program.retrieval) besides program's value types and errors;
# never the DSPy program itself (signatures, systems, the LM layer, saved programs).
DATA_MAY_TAKE_FROM_PROGRAM = ("program.types", "program.errors", "program.retrieval")
LAB = ("experiments.lab",)


def _modules(top: str, skip: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    out = []
    for path in sorted((ROOT / top).rglob("*.py")):
        package = ".".join(path.relative_to(ROOT).parts[:-1])
        if not _under(package, skip):
            out.append((path, package))
    return out


def test_data_takes_from_program_only_value_types_errors_and_retrieval():
    bad = {}
    for path, package in _modules("data"):
        taken = {n for n in imported_names(path, package) if n.split(".")[0] == "program"}
        if crossing := sorted(n for n in taken if not _under(n, DATA_MAY_TAKE_FROM_PROGRAM)):
            bad[str(path.relative_to(ROOT))] = crossing
    assert not bad, f"data/ imports parts of program/ beyond {DATA_MAY_TAKE_FROM_PROGRAM}: {bad}"


def test_the_composition_root_does_not_import_the_lab():
    assert (ROOT / "experiments" / "lab" / "__init__.py").is_file()
    bad = {}
    for path, package in _modules("experiments", skip=LAB):
        if crossing := sorted(n for n in imported_names(path, package) if _under(n, LAB)):
            bad[str(path.relative_to(ROOT))] = crossing
    assert not bad, f"the composition root imports the lab (experiments/lab): {bad}"


def test_the_import_checker_resolves_every_spelling(tmp_path):
    f = tmp_path / "x.py"
    f.write_text(
        "import experiments.lab.studies.embedding\n"
        "from experiments import lab\n"
        "from ..lab.benchmarks import suite\n"
        "from .report import markdown\n"
        "def f():\n"
        "    from program.retrieval.bm25 import BM25Retriever\n"
        "    from program import sharp\n"
    )
    names = imported_names(f, "experiments.commands")
    assert names == {
        "experiments.lab.studies.embedding",
        "experiments.lab",
        "experiments.lab.benchmarks.suite",
        "experiments.commands.report.markdown",
        "program.retrieval.bm25.BM25Retriever",
        "program.sharp",
    }
    assert sorted(n for n in names if _under(n, LAB)) == [
        "experiments.lab",
        "experiments.lab.benchmarks.suite",
        "experiments.lab.studies.embedding",
    ]
    taken = sorted(n for n in names if n.startswith("program") and not _under(n, DATA_MAY_TAKE_FROM_PROGRAM))
    assert taken == ["program.sharp"]


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
        "import program.sharp\nfrom program.sharp import SharpConfig, _terms, Run\nfrom program import serving\n"
        "program.sharp.loop._WORD\n"
    )
    assert private_uses(f) == [
        "from program.sharp import _terms",
        "from program.sharp import Run",
        "program.sharp.loop._WORD",
    ]


PACKAGES = ("program", "optimize", "data", "experiments")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the project's modules it imports, anywhere in the file (a lazy import inside a function
    counts: it is a dependency all the same)."""
    files = {module_name(p, root): p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                edges |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module for a in node.names
                }
        graph[mod] = {e for e in edges if e in files and e != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_checker_sees_a_cycle(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "a.py").write_text("from experiments import b\n")
    (tmp_path / "experiments" / "b.py").write_text("def f():\n    from experiments.a import x\n")
    (tmp_path / "experiments" / "c.py").write_text("import experiments.a\n")
    assert cycles(import_graph(tmp_path)) == [["experiments.a", "experiments.b"]]


def test_nothing_imports_a_command_module():
    """experiments/commands/* are the CLI's leaves: only experiments/cli.py loads them (by name)."""
    importers = {
        m: sorted(e for e in deps if e.startswith("experiments.commands")) for m, deps in import_graph().items()
    }
    assert {m: deps for m, deps in importers.items() if deps} == {}
