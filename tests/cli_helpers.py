"""Reading back what the CLI suggests: a test runs every command an error message names."""

from __future__ import annotations

import shlex


def suggested(message: str, program: str = "sharp") -> list[str]:
    """The arguments of the `sharp ...` (or `chroma ...`) command an error message suggests."""
    start = message.index(f"with: {program} ") + len("with: ")
    text = message[start:].splitlines()[0]
    for stop in (" (", ". "):
        text = text.split(stop)[0]
    return shlex.split(text.rstrip(". "))[1:]
