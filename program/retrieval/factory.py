"""open_retriever: the one way to get a Retriever for a built index."""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

from program.errors import IndexMismatchError, IndexMissingError
from program.retrieval.base import Retriever
from program.retrieval.bm25 import BM25Retriever
from program.retrieval.config import RetrieverConfig
from program.retrieval.dense import DenseRetriever
from program.retrieval.embedder import Embedder, method_of, shared_embedder
from program.retrieval.hop import HopRetriever
from program.retrieval.hybrid import HybridRetriever
from program.retrieval.manifest import BM25_DIR, CHROMA_DIR, mismatches, read_manifest

log = logging.getLogger(__name__)


def index_command(index_dir: Path, dataset: str | None = None, rebuild: bool = False) -> str:
    """The exact `sharp index` command that (re)builds the index at ``index_dir``."""
    index_dir = Path(index_dir).resolve()
    if index_dir.parent.name == "indexes":  # the default place: WORKSPACE/indexes/<dataset>
        cmd = f"sharp index --dataset {shlex.quote(dataset or index_dir.name)} --workspace {shlex.quote(str(index_dir.parent.parent))}"
    else:
        cmd = f"sharp index --dataset {shlex.quote(dataset or 'DATASET')} --index-dir {shlex.quote(str(index_dir))}"
    return cmd + (" --rebuild" if rebuild else "")


def open_retriever(
    index_dir: str | os.PathLike,
    config: RetrieverConfig | None = None,
    *,
    embedder: Embedder | None = None,
    corpus_sha256: str | None = None,
    dataset: str | None = None,
) -> Retriever:
    """A dense, BM25 or hybrid retriever (``config.mode``) over the index at ``index_dir``, wrapped in
    a :class:`~program.retrieval.hop.HopRetriever` when ``config.second_hop``.

    Raises IndexMissingError (no index, or an interrupted build: the message gives the command
    that builds or resumes it) and IndexMismatchError (the index was built with another
    embedding model or embedding method (dense and hybrid modes), text format, BM25 settings or,
    when ``corpus_sha256`` is given, corpus).
    """
    config = config or RetrieverConfig()
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir)
    if manifest is None:
        raise IndexMissingError(
            f"no retrieval index at {index_dir}. Build it with: {index_command(index_dir, dataset)}"
        )
    if manifest.get("status") != "complete":
        done = manifest.get("counts", {}).get("dense", "?")
        raise IndexMissingError(
            f"the index at {index_dir} is incomplete (build interrupted; {done} of "
            f"{manifest.get('num_passages', '?')} passages embedded). Resume it with: {index_command(index_dir, dataset)}"
        )
    settings = config.index_settings()
    if config.mode != "bm25":  # queries must be embedded as the passages were
        settings["embedding_method"] = method_of(embedder) if embedder is not None else config.embedding_method
    problems = mismatches(manifest, settings, corpus_sha256)
    if problems:
        raise IndexMismatchError(
            f"the index at {index_dir} does not match what was asked: "
            + "; ".join(problems)
            + f". Rebuild it with: {index_command(index_dir, dataset, rebuild=True)}"
            + (
                ""
                if "embedding_method" in settings and "embedding_method" not in manifest
                else " (or use the settings it was built with)"
            )
        )

    def dense() -> DenseRetriever:
        emb = embedder or shared_embedder(config)
        return DenseRetriever(index_dir, emb, dimension=manifest.get("dimension"))

    def bm25() -> BM25Retriever:
        return BM25Retriever(index_dir / BM25_DIR, manifest["bm25"])

    for part in (CHROMA_DIR, BM25_DIR):
        if not (index_dir / part).is_dir():
            raise IndexMissingError(
                f"the index at {index_dir} lacks its {part}/ folder. Rebuild it with: "
                f"{index_command(index_dir, dataset, rebuild=True)}"
            )
    base: Retriever
    if config.mode == "dense":
        base = dense()
    elif config.mode == "bm25":
        base = bm25()
    else:
        base = HybridRetriever(
            dense(), bm25(), config.dense_weight, config.bm25_weight, config.rrf_k, config.candidate_depth
        )
    if config.second_hop:
        return HopRetriever(
            base,
            keep=config.hop_keep,
            seeds=config.hop_seeds,
            seed_chars=config.hop_seed_chars,
            depth=config.hop_depth,
            rrf_k=config.rrf_k,
        )
    return base
