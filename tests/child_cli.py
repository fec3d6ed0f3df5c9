"""`sharp ...` in a child process, with the tests' hash embedder in place of the embedding model.

Each real `sharp` command is a new process and so a new Chroma: what Chroma writes when a fresh
process opens a store (and what a full disk does to a build) shows only there, not in a test
process that keeps Chroma's client for the path cached. The child imports the hash embedder alone
(tests/hash_embedder.py), not the tests' conftest with DSPy and pytest: seconds less per command.
"""

from __future__ import annotations

import subprocess

from read_only import run_python

CODE = """
import sys
from rich.console import Console
import data.indexing, program.retrieval.factory as factory
from hash_embedder import HashEmbedderFactory
from experiments.console import render
from experiments.cli import app
data.indexing.Embedder = HashEmbedderFactory
factory.shared_embedder = lambda config: HashEmbedderFactory.from_config(config)
render.err_console = Console(stderr=True, width=100_000)
app(ARGS, prog_name="sharp")
"""


def sharp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `sharp ARGS` in a child Python (exit code, stdout and stderr as text)."""
    args = [*args, "--no-progress"] if args[0] == "index" and "--verify" not in args else list(args)
    return run_python([], CODE.replace("ARGS", repr(args)), timeout)
