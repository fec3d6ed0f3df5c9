"""Design studies: scripts that measured the choices behind the defaults (not part of the product).

Each module's docstring says what it measured; experiments/RESULTS.md holds the figures and the
commands. Left out of the installed package (pyproject.toml); nothing in the product imports a study
(tests/test_product_boundary.py).
"""
