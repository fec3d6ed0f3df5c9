"""SHARP: a self-correcting multi-hop question-answering program written in DSPy.

    from program import load
    qa = load("hotpotqa")                # program/serving/loading.py
    pred = qa(question="...")

This package is the bottom layer: what is exported and served. It never imports ``optimize``, ``data``,
``experiments``, mlflow or optuna. Importing it is light: ``load`` (and with it dspy, the retrievers and the
LM layer) is imported on first use.
"""

from __future__ import annotations

from typing import Any

from program.version import __version__

__all__ = ["LoadInfo", "LoadedProgram", "__version__", "load"]

_LAZY = {"load", "LoadedProgram", "LoadInfo"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from program.serving import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'program' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
