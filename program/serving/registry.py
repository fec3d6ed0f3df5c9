"""Every system by name: its module class and its config class. One place, no branching on names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from program.config import StrictConfig
from program.errors import ConfigError
from program.retrieval.base import Retriever
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig
from program.systems.adaptive import AdaptiveConfig, AdaptiveRAG
from program.systems.closed_book import ClosedBook, ClosedBookConfig
from program.systems.crag import CorrectiveRAG, CRAGConfig
from program.systems.modes import (
    DenseRAG,
    DenseRAGConfig,
    HopRAG,
    HopRAGConfig,
    HybridRAG,
    HybridRAGConfig,
    RankedRAG,
    RankedRAGConfig,
)
from program.systems.react import ReActConfig, ReActRAG
from program.systems.rerank import LMRerankConfig, LMRerankRAG, RerankConfig, RerankRAG
from program.systems.selfrag import SelfRAG, SelfRAGConfig
from program.systems.vanilla import VanillaConfig, VanillaRAG

SYSTEMS: dict[str, tuple[type[dspy.Module], type[StrictConfig]]] = {
    "sharp": (SharpRAG, SharpConfig),
    "vanilla": (VanillaRAG, VanillaConfig),
    # the arena (issue 5): baselines and published self-correcting designs, same prediction shape
    "closed-book": (ClosedBook, ClosedBookConfig),
    "vanilla-dense": (DenseRAG, DenseRAGConfig),
    "vanilla-hybrid": (HybridRAG, HybridRAGConfig),
    "vanilla-hop": (HopRAG, HopRAGConfig),
    "vanilla-ranked": (RankedRAG, RankedRAGConfig),
    "vanilla-rerank": (RerankRAG, RerankConfig),
    "vanilla-lmrerank": (LMRerankRAG, LMRerankConfig),
    "self-rag": (SelfRAG, SelfRAGConfig),
    "crag": (CorrectiveRAG, CRAGConfig),
    "adaptive": (AdaptiveRAG, AdaptiveConfig),
    "react": (ReActRAG, ReActConfig),
}


class UnknownSystemError(ConfigError):
    """A system name that is not registered."""


def system_names() -> list[str]:
    return sorted(SYSTEMS)


def register(name: str, module_cls: type[dspy.Module], config_cls: type[StrictConfig]) -> None:
    SYSTEMS[name] = (module_cls, config_cls)


def config_for(name: str, values: Mapping[str, Any] | None = None) -> StrictConfig:
    if name not in SYSTEMS:
        raise UnknownSystemError(f"unknown system '{name}'; valid systems: {', '.join(system_names())}")
    return SYSTEMS[name][1].from_mapping(values or {})


def build_system(
    name: str, retriever: Retriever | None, config: Mapping[str, Any] | StrictConfig | None = None, **kwargs: Any
) -> dspy.Module:
    """Instantiate system ``name`` with its validated config."""
    cfg = config if isinstance(config, StrictConfig) else config_for(name, config)
    module_cls = SYSTEMS[name][0]
    return module_cls(retriever, cfg, **kwargs)
