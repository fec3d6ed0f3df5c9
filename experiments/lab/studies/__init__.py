"""Design studies: scripts that measured the choices behind the defaults (not part of the product).

Each module's docstring says what it measured; experiments/RESULTS.md holds the figures and the
commands. Left out of the installed package (pyproject.toml); nothing in the product imports a study
(tests/test_product_boundary.py).
"""

from pathlib import Path


def show(out: object, path: "Path | None" = None) -> None:
    """Print a study's result as JSON on stdout and, with ``path``, write it there too."""
    import json
    import sys

    text = json.dumps(out, indent=1, default=str)
    sys.stdout.write(text + "\n")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
