"""Composition: turn CLI options into a dataset, a retriever, LMs per role and a system."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy

from data.sources import DatasetSource, resolve_dataset
from experiments import settings
from experiments.keyvalue import merged
from program.digest import digest
from program.errors import ConfigError, ProgramFileError, SharpError
from program.lm import LMConfig, assign_lms
from program.serving import builds
from program.serving.defaults import DEFAULT_DATASET
from program.serving.loading import model_mismatch
from program.serving.registry import SYSTEMS, build_system, config_for
from program.serving.saved import SavedProgram, load_into, read_program
from program.sharp.gate import check_calibrators, ranker_id
from program.systems.modes import DATASET_RANKER, retriever_overrides

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Where things are, and how LMs and retrieval are set up for one command."""

    dataset: str = DEFAULT_DATASET
    data_dir: Path | None = None
    workspace: Path = field(default_factory=settings.workspace)
    lm_config: LMConfig = field(default_factory=LMConfig)
    retriever_config: dict = field(default_factory=dict)
    cache: bool = True
    cache_dir: Path | None = None
    index_path: Path | None = None  # --index-dir: the index folder, instead of WORKSPACE/indexes/<dataset>
    # set by program_path when no shipped SHARP program fits: SHARP then runs the ranked plain read
    ranked_read: bool = False

    def __post_init__(self) -> None:
        from experiments import rankers

        configure_cache(self.cache, self.cache_dir)
        self.retriever_config = rankers.resolve(dict(self.retriever_config or {}), Path(self.workspace), self.dataset)

    # ---- data -----------------------------------------------------------------------------
    @property
    def source(self) -> DatasetSource:
        """Where this dataset's questions and passages are (one resolution for every command)."""
        return dataset_source(self.dataset, self.data_dir)

    def examples(self, split: str, limit: int | None = None, seed: int = 0, balanced: bool = False) -> list:
        from data.loaders import load_examples

        return load_examples(self.source, split, limit=limit, seed=seed, balanced=balanced)

    def index_dir(self) -> Path:
        if self.index_path is not None:
            return Path(self.index_path)
        return settings.index_dir(self.source.name, self.workspace)

    # ---- retrieval -------------------------------------------------------------------------
    def retriever_settings(self, overrides: Mapping[str, Any] | None = None) -> Any:
        from experiments import rankers
        from program.retrieval import RetrieverConfig

        overrides = dict(overrides or {})
        if overrides.get("ranker") == DATASET_RANKER and self.retriever_config.get("ranker") is not None:
            del overrides["ranker"]  # a system's default ranker never replaces the one the user set
        merged = {**self.retriever_config, **overrides}
        if merged.get("ranker") == DATASET_RANKER and self.retriever_config.get("ranker") is None:
            merged = self._dataset_ranker(merged)
        return RetrieverConfig.from_mapping(rankers.resolve(merged, Path(self.workspace), self.dataset))

    def _dataset_ranker(self, merged: dict[str, Any]) -> dict[str, Any]:
        """A system's default ranker, "dataset" (the dataset's own evidence ranker), resolved; where none is
        fitted for this dataset, or the one found was fitted on another corpus than this index's, plain hybrid
        search, with a warning that says how to fit one. A ranker the user names (``--retriever-set
        ranker=NAME``) is never dropped: it fits or the command fails."""
        from experiments import rankers
        from program.retrieval.ranked import EvidenceRanker

        try:
            resolved = rankers.resolve(merged, Path(self.workspace), self.dataset)
        except rankers.RankerNotFoundError as exc:
            problem = str(exc)
        else:
            corpus = self.index_manifest().get("corpus_sha256")
            problem = EvidenceRanker.from_mapping(resolved["ranker"]).corpus_problem(corpus, self.source.name)
            if not problem:
                return resolved
        log.warning("no evidence ranker fits this corpus, so plain hybrid search: %s", problem)
        return {**merged, "ranker": None}

    def retriever(self, overrides: Mapping[str, Any] | None = None) -> Any:
        from program.retrieval import open_retriever

        return open_retriever(
            self.index_dir(),
            self.retriever_settings(overrides),
            dataset=self.source.ref(),
            rerankers_dir=settings.rerankers_dir(self.workspace),
        )

    def passages(self) -> Any:
        """The index's passages by id, as a lookup that gives recorded passages their text back (a replay's,
        and a recording's that grows from the rounds it holds): program.sharp.rounds.PassageLookup. The passages
        are read on the lookup's first use."""
        import functools
        import json

        from program.retrieval.bm25 import PASSAGES_FILE
        from program.retrieval.manifest import BM25_DIR
        from program.sharp.rounds import lookup_in
        from program.types import Passage

        path = self.index_dir() / BM25_DIR / PASSAGES_FILE

        @functools.cache
        def texts() -> Any:
            if not path.is_file():
                raise ConfigError(f"no index passages at {path}: build the index first (sharp index --dataset ...)")
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
            return lookup_in({str(r["id"]): Passage(str(r["id"]), r["title"], r["text"]) for r in rows})

        return lambda recorded: texts()(recorded)

    def build_index(self, progress: bool = True, rebuild: bool = False, batch_size: int | None = None) -> dict:
        """Build (or resume, repair, or with ``rebuild`` build anew) this dataset's index with the runtime's
        retriever settings."""
        from data.indexing import build_index

        source = self.source
        return build_index(
            source.corpus(),
            self.index_dir(),
            self.retriever_settings(),
            batch_size=batch_size,
            progress=progress,
            rebuild=rebuild,
            dataset=source.ref(),
        )

    def verify_index(self) -> dict:
        """Check the built index fully (every file's size and sha256, the vectors' store); write nothing."""
        from data.indexing import verify_index

        return verify_index(self.index_dir(), self.retriever_settings(), dataset=self.source.ref())

    def index_manifest(self) -> dict:
        from program.retrieval.manifest import read_manifest

        return read_manifest(self.index_dir()) or {}

    # ---- systems ---------------------------------------------------------------------------
    def system(self, name: str, config: Mapping[str, Any] | None = None, retriever: Any = None) -> dspy.Module:
        """The uncompiled system ``name`` with ``config``; SHARP where no shipped program fits the corpus and
        model (:meth:`program_path` said so): the ranked plain read under ``config``."""
        from program.serving.shipped import RANKED_READ

        ranked = name == "sharp" and self.ranked_read
        cfg = config_for(name, {**RANKED_READ, **(config or {})} if ranked else config)
        module_cls = SYSTEMS[name][0]
        if retriever is None and getattr(module_cls, "NEEDS_RETRIEVER", True):
            retriever = self.retriever(retriever_overrides(cfg))  # e.g. vanilla-dense: the index in that mode
        extra = getattr(module_cls, "extra_retrievers", None)  # e.g. CRAG's lexical fallback route
        extra = {kw: self.retriever(overrides) for kw, overrides in extra(cfg).items()} if extra else {}
        module = build_system(name, retriever, cfg, **extra)
        self.check_calibrator(module, retriever_overrides(cfg))
        assign_lms(module, self.lm_config)
        return module

    def saved_program(self, path: str | Path, config: Mapping[str, Any] | None = None) -> SavedProgram:
        """The saved program at ``path`` as this command runs it (:func:`as_run`): ``config`` (--config,
        --set) over its config, validated; this runtime's retriever settings over the ones it recorded."""
        return as_run(read_program(path), config, self.retriever_config)

    def load_program(
        self, path: str | Path, config: Mapping[str, Any] | None = None
    ) -> tuple[dspy.Module, SavedProgram]:
        """The saved program at ``path``, built, with ``config`` over its config (:meth:`saved_program`)."""
        saved = self.saved_program(path, config)
        retriever = self.retriever(saved.retriever)
        module = load_into(saved, retriever)
        self.check_calibrator(module, saved.retriever)
        mismatch = model_mismatch(saved, module.config, self.lm_config, self.workspace)
        if mismatch:
            log.warning("%s", mismatch)
        assign_lms(module, self.lm_config)
        return module, saved

    def program_path(self, ref: str | None, system: str = "sharp", tracking_uri: str | None = None) -> Path | None:
        """The saved program a command runs: ``ref`` (a path or an MLflow URI), ``"default"`` (the shipped
        compiled program for this index and model; an error when none fits), ``"none"`` (no program: the
        uncompiled system), or nothing given: for SHARP, the shipped program when one fits, else None."""
        from program.serving import shipped

        if ref in (None, shipped.DEFAULT, shipped.NONE):
            if ref == shipped.NONE or (ref is None and system != "sharp"):
                return None
            models = {self.lm_config.resolve(role).model for role in ("planner", "critic", "generator")}
            lm = models.pop() if len(models) == 1 else None
            found = shipped.default_program(self.index_manifest().get("corpus_sha256"), lm) if lm else None
            built = builds.built_program(self.workspace, self.source.name, lm) if lm and found is None else None
            if built is not None:
                log.info("using the program built here, %s; --program none runs the uncompiled SHARP", built)
                return built
            if found is None:
                if ref == shipped.DEFAULT:
                    raise ProgramFileError(
                        f"no shipped compiled program fits the {self.dataset!r} index with the model(s) "
                        f"{sorted(models | ({lm} if lm else set()))}; shipped: "
                        f"{[s.describe() for s in shipped.shipped_programs()] or 'none'}"
                    )
                if ref is None and system == "sharp":
                    self.ranked_read = True
                    log.warning(
                        "no shipped SHARP program for the %s corpus and %s: running the ranked plain read (the "
                        "draft alone, no repair); --program none runs the uncompiled SHARP",
                        self.dataset,
                        lm or sorted(models),
                    )
                    if lm:  # a line of its own, so the console shows it whole
                        log.warning("no program for %s here: %s", lm, self.build_hint(lm))
                else:
                    log.info("no shipped compiled program fits this index and model: the uncompiled %s", system)
                return None
            log.info("using %s; --program none runs the uncompiled SHARP", found.describe())
            return found.path
        from experiments.export import resolve_program_path

        return resolve_program_path(ref, self.workspace, tracking_uri=tracking_uri)

    def build_hint(self, model: str) -> str:
        """The `sharp build` command that builds a program for this corpus and ``model``, with its time where a
        build measured that model's speed here (program/serving/builds.py)."""
        try:
            questions = len(self.examples("train", limit=1 << 30))
        except SharpError:  # no train split here: the command is said all the same
            questions = None
        return builds.build_hint(self.dataset, model, self.workspace, questions, self.source.name)

    def check_calibrator(self, module: dspy.Module, overrides: Mapping[str, Any] | None = None) -> None:
        """A program's answer calibrators must have been fitted on this index's corpus with this ranker."""
        check_calibrators(
            getattr(module, "config", None),
            self.index_manifest().get("corpus_sha256"),
            ranker_id(self.retriever_settings(overrides)),
            self.dataset,
        )


def as_run(
    saved: SavedProgram, config: Mapping[str, Any] | None = None, retriever: Mapping[str, Any] | None = None
) -> SavedProgram:
    """``saved`` with a command's settings over its own, none dropped: ``config`` (--config, then --set) merged
    over its config and validated against its system's config class (an unknown key or a bad value is a
    ConfigError naming it), and ``retriever`` (--retriever-config, --retriever-set, --mode, --chroma-url:
    the settings the user gave) over the retriever settings it was saved with."""
    if config:
        try:
            values = config_for(saved.system, merged(saved.config, config)).model_dump(mode="json")
        except ConfigError as exc:
            raise ConfigError(f"--config/--set over the saved {saved.system!r} program: {exc}") from None
        saved = replace(saved, config=values)
    if retriever:
        saved = replace(saved, retriever={**saved.retriever, **retriever})
    return saved


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
    """``digest(obj, 12)``; kept for experiments/commands/fitting.py (its manifests record this length)."""
    return digest(obj, 12)


def dataset_source(dataset: str | Path | DatasetSource, data_dir: Path | None = None) -> DatasetSource:
    """The one resolution of ``--dataset`` (data/sources.py), with the data folder found as
    experiments/settings.py says (--data-dir, $SHARP_DATA, ./datasets, ../shared/datasets) and
    looked up only when a benchmark's files are read."""
    return resolve_dataset(dataset, data_dir if data_dir else lambda: settings.data_dir())


def load_dataset_corpus(dataset: str, data_dir: Path | None) -> list:
    """The passages to index: DATA_DIR/NAME/corpus.jsonl, PATH/corpus.jsonl, a corpus JSONL
    file, or the paragraphs of a question file (its context / paragraphs)."""
    return dataset_source(dataset, data_dir).corpus()


def index_name(dataset: str) -> str:
    """The folder name under WORKSPACE/indexes for a dataset name or path (as :meth:`Runtime.index_dir`)."""
    return dataset_source(dataset).name


def load_questions(dataset: str, split: str, data_dir: Path | None, limit: int | None = None, seed: int = 0) -> list:
    """Questions of a split: a named dataset, a folder holding SPLIT.json(l), or a question file."""
    from data.loaders import load_examples

    return load_examples(dataset_source(dataset, data_dir), split, limit=limit, seed=seed)
