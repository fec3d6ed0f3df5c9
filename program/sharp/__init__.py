"""SHARP's loop, one room: draft -> judge -> (repair -> judge)* -> the most confident round's answer.

* ``module.py``: :class:`SharpRAG`, the DSPy module (its predictors) and the live source of its rounds.
* ``policy.py``: :class:`SharpConfig` (every setting an optimizer may tune) and :class:`Explore` (a recording's).
* ``loop.py``: :func:`play`, the loop written once, and its pure decisions (settle, judge, next step, select).
* ``rounds.py``: a round as one typed record, and where rounds come from (live, or a recording).
* ``gate.py``: P(right) of a round (the calibrated gate, and the judge over the critic's verdict).
* ``critic.py``: how the critic LM's reply is read.
* ``forms.py``, ``answer_types.py``: what a question asks (bridge, comparison, yes/no; the kind of answer).
* ``values.py``, ``spans.py``, ``sentences.py``: code's rules over what was read.

``from program.sharp import SharpRAG, SharpConfig, play`` works; the names load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Explore", "SharpConfig", "SharpRAG", "play"]

_LAZY = {"SharpRAG": "module", "SharpConfig": "policy", "Explore": "policy", "play": "loop"}


def __getattr__(name: str) -> Any:
    part = _LAZY.get(name)
    if part is None:
        raise AttributeError(f"module 'program.sharp' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"program.sharp.{part}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
