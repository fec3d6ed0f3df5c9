"""SHARP: a self-correcting multi-hop question-answering program written in DSPy.

This package is the bottom layer: what is exported and served. It never imports
``optimize``, ``data``, ``experiments``, mlflow or optuna.
"""

__version__ = "0.1.0"
