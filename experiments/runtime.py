"""Composition: turn CLI options into a dataset, a retriever, LMs per role and a system."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from data.loaders import DATASETS
from experiments import settings
from program.lm import LMConfig, assign_lms
from program.registry import SYSTEMS, build_system, config_for
from program.saved import SavedProgram, load_into, read_program
from program.systems.modes import retriever_overrides

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Where things are, and how LMs and retrieval are set up for one command."""

    dataset: str = "hotpotqa"
    data_dir: Path | None = None
    workspace: Path = field(default_factory=settings.workspace)
    lm_config: LMConfig = field(default_factory=LMConfig)
    retriever_config: dict = field(default_factory=dict)
    cache: bool = True
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        configure_cache(self.cache, self.cache_dir)

    # ---- data -----------------------------------------------------------------------------
    def examples(self, split: str, limit: int | None = None, seed: int = 0, balanced: bool = False) -> list:
        from data.loaders import load_examples

        return load_examples(
            self.dataset, split, settings.data_dir(self.data_dir), limit=limit, seed=seed, balanced=balanced
        )

    def index_dir(self) -> Path:
        name = Path(self.dataset).stem if self.dataset not in DATASETS else self.dataset
        return settings.index_dir(name, self.workspace)

    # ---- retrieval -------------------------------------------------------------------------
    def retriever_settings(self, overrides: Mapping[str, Any] | None = None) -> Any:
        from program.retrieval import RetrieverConfig

        return RetrieverConfig.from_mapping({**self.retriever_config, **(overrides or {})})

    def retriever(self, overrides: Mapping[str, Any] | None = None) -> Any:
        from program.retrieval import open_retriever

        return open_retriever(
            self.index_dir(),
            self.retriever_settings(overrides),
            dataset=self.dataset,
            rerankers_dir=settings.rerankers_dir(self.workspace),
        )

    def build_index(self, progress: bool = True) -> dict:
        """Build (or resume) this dataset's index with the runtime's retriever settings."""
        from data.indexing import build_index

        passages = load_dataset_corpus(self.dataset, self.data_dir)
        return build_index(
            passages, self.index_dir(), self.retriever_settings(), progress=progress, dataset=self.dataset
        )

    def index_manifest(self) -> dict:
        path = self.index_dir() / "manifest.json"
        return json.loads(path.read_text()) if path.exists() else {}

    # ---- systems ---------------------------------------------------------------------------
    def system(self, name: str, config: Mapping[str, Any] | None = None, retriever: Any = None) -> dspy.Module:
        cfg = config_for(name, config)
        module_cls = SYSTEMS[name][0]
        if retriever is None and getattr(module_cls, "NEEDS_RETRIEVER", True):
            retriever = self.retriever(retriever_overrides(cfg))  # e.g. vanilla-dense: the index in that mode
        extra = getattr(module_cls, "extra_retrievers", None)  # e.g. CRAG's lexical fallback route
        extra = {kw: self.retriever(overrides) for kw, overrides in extra(cfg).items()} if extra else {}
        module = build_system(name, retriever, cfg, **extra)
        assign_lms(module, self.lm_config)
        return module

    def load_program(self, path: str | Path) -> tuple[dspy.Module, SavedProgram]:
        saved = read_program(path)
        retriever = self.retriever(saved.retriever)
        module = load_into(saved, retriever)
        assign_lms(module, self.lm_config)
        return module, saved


def configure_cache(enabled: bool, cache_dir: Path | None) -> None:
    """DSPy's answer cache: on by default; off, or in a separate folder, on request."""
    if cache_dir is not None:
        os.environ["DSPY_CACHEDIR"] = str(cache_dir)
    dspy.configure_cache(
        enable_disk_cache=enabled,
        enable_memory_cache=enabled,
        **({"disk_cache_dir": str(cache_dir)} if cache_dir else {}),
    )


def config_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def load_dataset_corpus(dataset: str, data_dir: Path | None) -> list:
    """The passages to index: DATA_DIR/NAME/corpus.jsonl, PATH/corpus.jsonl, a corpus JSONL
    file, or the paragraphs of a question file (its context / paragraphs)."""
    from data.corpus import CORPUS_FILE, corpus_from_file, corpus_path, load_corpus
    from data.errors import DatasetError

    if dataset.lower() in DATASETS:
        return load_corpus(corpus_path(dataset.lower(), settings.data_dir(data_dir)))
    path = Path(dataset)
    if path.is_dir():
        if not (path / CORPUS_FILE).is_file():
            raise DatasetError(f"{path}: no {CORPUS_FILE} in this folder")
        return load_corpus(path / CORPUS_FILE)
    if not path.exists():
        raise DatasetError(f"unknown dataset {dataset!r}: not one of {', '.join(DATASETS)} and no such path")
    return load_corpus(path) if path.name == CORPUS_FILE else corpus_from_file(path)
