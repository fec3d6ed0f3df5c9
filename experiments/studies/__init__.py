"""Design studies: scripts that measured the choices behind the defaults (not part of the product).

Each module's docstring says what it measured; RESULTS.md holds the figures and the commands.
"""
