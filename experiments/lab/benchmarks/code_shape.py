"""The shape of the code: the longest functions and the repeated code, for a tree now and at another commit.

    python -m experiments.lab.benchmarks.code_shape [--rev REV] [--top 10]

Function lengths come from the AST of every ``.py`` file under program/, optimize/, data/ and experiments/
(lines from ``def`` to the last line of the body). Repeated code is the ``duplicates`` tool's count of pairs of
places sharing six or more lines (identical or same-shape), over the whole tree, when the tool is on PATH.
With ``--rev`` the tree is that commit's, checked out in a temporary folder and formatted with this
checkout's ruff settings first, so formatting does not count as a difference.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("program", "optimize", "data", "experiments")


def functions(root: Path) -> list[tuple[int, str]]:
    """(lines, "path:name") of every function and method, longest first."""
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(root)}:{node.name}"))
    return sorted(out, reverse=True)


def repeated(root: Path) -> str:
    if shutil.which("duplicates") is None:
        return "duplicates: not on PATH"
    res = subprocess.run(["duplicates", "--seconds", "120", "--most", "1"], cwd=root, capture_output=True, text=True)
    return res.stdout.splitlines()[0] if res.stdout else res.stderr.strip()


def report(root: Path, top: int) -> str:
    funcs = functions(root)
    lines = [f"{root}: {len(funcs)} functions, {sum(n > 50 for n, _ in funcs)} over 50 lines", repeated(root)]
    lines += [f"  {n:4d}  {name}" for n, name in funcs[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", help="Also measure this commit (formatted with this checkout's ruff settings).")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parents[3]
    sys.stdout.write(report(here, args.top) + "\n")
    if args.rev:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["git", "-C", str(here), "worktree", "add", "-q", "--detach", tmp, args.rev], check=True)
            try:
                ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
                subprocess.run([ruff, "format", "-q", "--config", str(here / "pyproject.toml"), tmp], check=False)
                sys.stdout.write(report(Path(tmp), args.top).replace(tmp, f"at {args.rev}") + "\n")
            finally:
                subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", tmp], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
