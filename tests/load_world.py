"""A world that `program.load`, `sharp ask` and an exported model all read, for tests: the toy corpus and the
README's passages (tests/toy_world.py) as the dataset "hotpotqa", indexed for real (BM25 and Chroma, with the
hashing embedder in place of the embedding model: tests/doubles.py), and SHARP programs fitted on that
corpus, saved as `sharp compile` saves them and shipped in a folder laid out as program/compiled/
(program/serving/shipped.py). The LMs are the rule LM over HTTP (tests/live_servers.py RuleServer): by configuration
(``lm=RULES_MODEL, api_base=...``), or standing in for whatever model a spec names (:func:`rule_lm_builder`).

Nothing here imports experiments/, data/ or MLflow at import time, so a child process that runs the README's
Python example can use it and still prove that loading a program needs none of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doubles import HashEmbedderFactory, KeywordRetriever
from toy_world import CORPUS, README_PASSAGES

PASSAGES = [*CORPUS, *README_PASSAGES]
RULES_MODEL = "openai/rules"
DATASET = "hotpotqa"


def use_hash_embedder(monkeypatch: Any) -> None:
    """Index building (data/indexing.py) and queries (program/retrieval/factory.py) embed with HashEmbedder."""
    import data.indexing
    import program.retrieval.factory as factory

    monkeypatch.setattr(data.indexing, "Embedder", HashEmbedderFactory)
    monkeypatch.setattr(factory, "shared_embedder", HashEmbedderFactory.from_config)


def build_index(ws: Path, name: str = DATASET, passages: list | None = None) -> dict:
    """WS/indexes/NAME over ``passages`` (default: PASSAGES) with the default retriever settings; returns its
    manifest. Needs :func:`use_hash_embedder`."""
    from data.indexing import build_index as build
    from program.retrieval import RetrieverConfig

    manifest = build(passages or PASSAGES, Path(ws) / "indexes" / name, RetrieverConfig(), progress=False, dataset=name)
    assert manifest["status"] == "complete"
    return manifest


def gate(corpus_sha256: str, dataset: str = DATASET) -> Any:
    """An answer gate fitted (by hand) on ``corpus_sha256``: P(right) grows with the answer's confidence."""
    from program.sharp.gate import AnswerCalibrator

    fitted_on = {"corpus_sha256": corpus_sha256, "dataset": dataset, "role": "gate"}
    return AnswerCalibrator.make(("lp_mean",), (-0.5,), (0.5,), (2.0,), 0.0, fitted_on)


def save(path: Path, manifest: dict, lm: str = RULES_MODEL, dataset: str = DATASET, **config: Any) -> Path:
    """A SHARP program as `sharp compile` saves it: fitted on the index of ``manifest``, compiled with ``lm``;
    no evidence ranker (the hybrid search of the default retriever settings), ``config`` over the defaults."""
    from program.retrieval import RetrieverConfig
    from program.serving.saved import save_program
    from program.sharp.module import SharpRAG
    from program.sharp.policy import SharpConfig

    module = SharpRAG(KeywordRetriever(PASSAGES), SharpConfig(ranker=None, **config))
    return save_program(
        path,
        module,
        "sharp",
        retriever=RetrieverConfig().model_dump(mode="json"),
        lm={"default": {"model": lm}},
        index_manifest=manifest,
        meta={"dataset": dataset},
    )


def ship(folder: Path, manifest: dict, lm: str = RULES_MODEL, name: str = "sharp-hotpotqa", **config: Any) -> Path:
    """``folder`` laid out as program/compiled/: the program ``name`` (:func:`save`) and MANIFEST.json naming
    it, compiled on the corpus of ``manifest`` with ``lm``. Point program.serving.shipped.COMPILED_DIR at it."""
    from program.serving.shipped import MANIFEST, manifest_entry

    folder.mkdir(parents=True, exist_ok=True)
    path = save(folder / f"{name}.json", manifest, lm, **config)
    entry = {"dataset": DATASET, "corpus_sha256": manifest["corpus_sha256"], "lm": lm, "system": "sharp"}
    (folder / MANIFEST).write_text(json.dumps({"programs": {name: manifest_entry(path, entry)}}))
    return path


def rule_lm_builder(base: str) -> Callable[..., Any]:
    """A stand-in for program.lm.factory.build_lm: the LM of any spec (the default local model included) is
    the rule LM at ``base``, accounted and error-mapped like any SharpLM (no retries, cache as the spec says)."""
    from program.lm.factory import build_lm

    def build(spec: Any, role: str = "default") -> Any:
        return build_lm(spec.replace(model=RULES_MODEL, api_base=base, num_retries=0), role)

    return build
