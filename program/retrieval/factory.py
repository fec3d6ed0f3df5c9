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
from program.retrieval.embedder import Embedder, shared_embedder
from program.retrieval.hop import HopRetriever
from program.retrieval.hybrid import HybridRetriever
from program.retrieval.manifest import BM25_DIR, CHROMA_DIR, mismatches, read_manifest
from program.retrieval.reranker import CrossEncoderReranker, RerankerError, RerankingRetriever, train_command

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
    rerankers_dir: str | os.PathLike | None = None,
) -> Retriever:
    """A dense, BM25 or hybrid retriever (``config.mode``) over the index at ``index_dir``, wrapped in
    a :class:`~program.retrieval.hop.HopRetriever` when ``config.second_hop``.

    Raises IndexMissingError (no index, or an interrupted build: the message gives the command
    that builds or resumes it) and IndexMismatchError (the index was built with another
    embedding model, text format, BM25 settings or, when ``corpus_sha256`` is given, corpus).
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
    problems = mismatches(manifest, config.index_settings(), corpus_sha256)
    if problems:
        raise IndexMismatchError(
            f"the index at {index_dir} does not match what was asked: "
            + "; ".join(problems)
            + f". Rebuild it with: {index_command(index_dir, dataset, rebuild=True)} "
            "(or use the settings it was built with)"
        )
    if manifest.get("backend") != config.backend:
        log.info("index embedded with %s; queries use %s (same model)", manifest.get("backend"), config.backend)

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
        base = HopRetriever(
            base,
            keep=config.hop_keep,
            seeds=config.hop_seeds,
            seed_chars=config.hop_seed_chars,
            depth=config.hop_depth,
            rrf_k=config.rrf_k,
        )
    if config.reranker:
        folder = reranker_folder(config.reranker, rerankers_dir)
        scorer = CrossEncoderReranker(folder, corpus_sha256=manifest.get("corpus_sha256"), dataset=dataset)
        base = RerankingRetriever(base, scorer, depth=config.rerank_depth)
    return base


def reranker_folder(name: str, rerankers_dir: str | os.PathLike | None) -> Path:
    """The folder of a reranker given by name (under ``rerankers_dir``) or as a folder path."""
    if rerankers_dir is not None and (Path(rerankers_dir) / name).is_dir():
        return Path(rerankers_dir) / name
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    where = f" in {rerankers_dir}" if rerankers_dir is not None else ""
    raise RerankerError(f"no reranker named {name!r}{where}. Train one with: {train_command(None, name)}")
