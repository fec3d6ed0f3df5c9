"""open_retriever: the one way to get a Retriever for a built index."""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from program.errors import IndexCorruptError, IndexMismatchError, IndexMissingError, IndexServerError, StorageError
from program.retrieval import integrity, store
from program.retrieval.base import Retriever
from program.retrieval.bm25 import BM25Retriever
from program.retrieval.config import RetrieverConfig
from program.retrieval.dense import DenseRetriever
from program.retrieval.embedder import Embedder, method_of, shared_embedder
from program.retrieval.hop import HopRetriever
from program.retrieval.hybrid import HybridRetriever
from program.retrieval.integrity import Damage
from program.retrieval.manifest import BM25_DIR, CHROMA_DIR, mismatches, read_manifest
from program.retrieval.ranked import CandidatePools, RankedRetriever
from program.retrieval.reranker import CrossEncoderReranker, RerankerError, RerankingRetriever, train_command
from program.retrieval.store import EMBEDDED, SERVER, DenseStore, built_with, server_command

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetRef:
    """How to name a dataset in a `sharp index` command (built by data/sources.py)."""

    spec: str  # the --dataset value: a dataset name or an absolute path
    name: str  # the folder name it gets under WORKSPACE/indexes
    data_dir: str | None = None  # --data-dir, when one was given


def index_command(
    index_dir: Path, dataset: str | DatasetRef | None = None, rebuild: bool = False, chroma_url: str | None = None
) -> str:
    """The exact `sharp index` command that (re)builds, resumes or repairs the index at ``index_dir``."""
    index_dir = Path(index_dir).resolve()
    ref = dataset if isinstance(dataset, DatasetRef) else None
    spec = ref.spec if ref else (dataset or index_dir.name)
    parts = ["sharp index --dataset", shlex.quote(spec)]
    if ref and ref.data_dir:
        parts += ["--data-dir", shlex.quote(ref.data_dir)]
    default_place = index_dir.parent.name == "indexes" and (ref is None or ref.name == index_dir.name)
    if default_place:  # WORKSPACE/indexes/<dataset>
        parts += ["--workspace", shlex.quote(str(index_dir.parent.parent))]
    else:
        parts += ["--index-dir", shlex.quote(str(index_dir))]
    if chroma_url:
        parts += ["--chroma-url", shlex.quote(chroma_url)]
    return " ".join(parts) + (" --rebuild" if rebuild else "")


def fit_ranker_command(index_dir: Path, dataset: str | DatasetRef | None = None) -> str:
    """The `sharp fit-ranker` command that fits an evidence ranker for the index at ``index_dir``."""
    command = index_command(index_dir, dataset).replace("sharp index ", "sharp fit-ranker ", 1)
    return command.split(" --index-dir ")[0]


def load_manifest(index_dir: Path, dataset: str | DatasetRef | None = None, chroma_url: str | None = None) -> dict:
    """The manifest of a complete index, or IndexMissingError / IndexCorruptError with the command that
    builds, resumes or rebuilds it."""
    try:
        manifest = read_manifest(index_dir)
    except IndexCorruptError as exc:
        raise IndexCorruptError(
            f"{exc}. Rebuild the index with: {index_command(index_dir, dataset, True, chroma_url)}"
        ) from None
    if manifest is None:
        raise IndexMissingError(
            f"no retrieval index at {index_dir}. Build it with: {index_command(index_dir, dataset, chroma_url=chroma_url)}"
        )
    if manifest.get("status") != "complete":
        done = manifest.get("counts", {}).get("dense", "?")
        raise IndexMissingError(
            f"the index at {index_dir} is incomplete (build interrupted; {done} of "
            f"{manifest.get('num_passages', '?')} passages embedded). Resume it with: "
            f"{index_command(index_dir, dataset, chroma_url=chroma_url)}"
        )
    return manifest


def dense_store(
    index_dir: Path, manifest: dict, url: str | None, dataset: str | DatasetRef | None = None
) -> DenseStore:
    """Where the index's vectors are; IndexMismatchError when ``url`` contradicts the manifest."""
    recorded = manifest.get("dense_store") or {"kind": EMBEDDED}
    if recorded.get("kind") == SERVER and not url:
        raise IndexMismatchError(
            f"the vectors of the index at {index_dir} live in collection {recorded.get('collection')} of a Chroma "
            f"server (built through {recorded.get('url')}): pass --chroma-url {recorded.get('url')} (start that "
            f"server with: {server_command(recorded.get('url') or 'http://127.0.0.1:8000', index_dir)})"
        )
    if recorded.get("kind") != SERVER and url:
        raise IndexMismatchError(
            f"the index at {index_dir} keeps its vectors in its own {CHROMA_DIR}/ folder, not in the Chroma server "
            f"at {url}: drop --chroma-url, or move them to the server with: "
            f"{index_command(index_dir, dataset, True, url)}"
        )
    return DenseStore.for_index(index_dir, url, manifest)


def index_damage(
    index_dir: Path, manifest: dict, parts: tuple[str, ...] = ("bm25", "dense"), full: bool = False
) -> list[Damage]:
    """The files of ``parts`` that are not what the manifest records (``full``: checksums too)."""
    embedded = (manifest.get("dense_store") or {}).get("kind", EMBEDDED) == EMBEDDED
    folders = [BM25_DIR] * ("bm25" in parts) + [CHROMA_DIR] * ("dense" in parts and embedded)
    damage = [Damage(f"{part}/", "is missing") for part in folders if not (index_dir / part).is_dir()]
    if damage:
        return damage
    files = {rel: want for rel, want in (manifest.get("files") or {}).items() if integrity.part_of(rel) in parts}
    return integrity.check(index_dir, files, full)


def check_index(
    index_dir: Path,
    manifest: dict,
    parts: tuple[str, ...] = ("bm25", "dense"),
    full: bool = False,
    dataset: str | DatasetRef | None = None,
    chroma_url: str | None = None,
) -> None:
    """IndexCorruptError, naming each damaged file and the command that repairs it, when a file of
    ``parts`` is not what the manifest records (``full``: checksums too; see integrity.py)."""
    damage = index_damage(index_dir, manifest, parts, full)
    if damage:
        raise IndexCorruptError(damage_message(index_dir, damage, dataset, chroma_url))


def damage_message(
    index_dir: Path, damage: list[Damage], dataset: str | DatasetRef | None = None, chroma_url: str | None = None
) -> str:
    """What is damaged, and the repair: `sharp index` rebuilds a damaged BM25 part by itself (seconds);
    damaged vectors need --rebuild (the whole index is embedded again)."""
    rebuild = any(d.part != "bm25" for d in damage)
    what = "; ".join(str(d) for d in damage[:5]) + (f"; and {len(damage) - 5} more" if len(damage) > 5 else "")
    return (
        f"the index at {index_dir} is damaged: {what}. "
        f"{'Rebuild' if rebuild else 'Repair'} it with: {index_command(index_dir, dataset, rebuild, chroma_url)}"
    )


def open_retriever(
    index_dir: str | os.PathLike,
    config: RetrieverConfig | None = None,
    *,
    embedder: Embedder | None = None,
    corpus_sha256: str | None = None,
    dataset: str | DatasetRef | None = None,
    rerankers_dir: str | os.PathLike | None = None,
) -> Retriever:
    """A dense, BM25 or hybrid retriever (``config.mode``) over the index at ``index_dir``, wrapped in
    a :class:`~program.retrieval.hop.HopRetriever` when ``config.second_hop``.

    Raises IndexMissingError (no index, or an interrupted build: the message gives the command
    that builds or resumes it), IndexMismatchError (the index was built with another embedding
    model or embedding method (dense and hybrid modes), text format, BM25 settings or, when ``corpus_sha256`` is given, corpus; or its vectors
    are elsewhere than ``config.chroma_url`` says), IndexCorruptError (a file of the parts this mode
    reads is missing or has another size than recorded: the message names it and the repair
    command) and IndexServerError (``config.chroma_url`` does not answer).
    """
    config = config or RetrieverConfig()
    index_dir = Path(index_dir)
    url = config.chroma_url
    manifest = load_manifest(index_dir, dataset, url)
    _refuse_mismatch(index_dir, manifest, config, embedder, corpus_sha256, dataset)
    parts = {"dense": ("dense",), "bm25": ("bm25",)}.get(config.mode, ("bm25", "dense"))
    check_index(index_dir, manifest, parts, dataset=dataset, chroma_url=url)
    return _assemble(index_dir, manifest, config, embedder, dataset, rerankers_dir)


def _assemble(
    index_dir: Path,
    manifest: dict,
    config: RetrieverConfig,
    embedder: Embedder | None,
    dataset: str | DatasetRef | None,
    rerankers_dir: str | os.PathLike | None,
) -> Retriever:
    """The retriever ``config`` asks for over the checked index: a learned ranker over hybrid pools, or a
    dense, BM25 or hybrid one with its wrappers (see _wrapped)."""
    url = config.chroma_url

    def dense() -> DenseRetriever:
        collection = open_dense(index_dir, manifest, url, dataset)  # before loading the model: fail fast
        emb = embedder or shared_embedder(config)
        return DenseRetriever(index_dir, emb, dimension=manifest.get("dimension"), collection=collection)

    def bm25() -> BM25Retriever:
        try:
            return BM25Retriever(index_dir / BM25_DIR, manifest["bm25"])
        except (ValueError, OSError, KeyError) as exc:  # numpy, json and bm25s on cut or changed files
            damage = [Damage(f"{BM25_DIR}/", f"does not load ({type(exc).__name__}: {exc})")]
            raise IndexCorruptError(damage_message(index_dir, damage, dataset, url)) from None

    base: Retriever
    if config.ranker is not None:
        name = dataset.name if isinstance(dataset, DatasetRef) else (Path(dataset).name if dataset else None)
        config.ranker.check_fits(manifest.get("corpus_sha256"), fit_ranker_command(index_dir, dataset), name)
        lexical = bm25()
        hybrid = HybridRetriever(
            dense(), lexical, config.dense_weight, config.bm25_weight, config.rrf_k, config.candidate_depth
        )
        pools = CandidatePools(hybrid, lexical.passages, **config.ranker.pool_settings())
        return RankedRetriever(pools, config.ranker)
    if config.mode == "dense":
        base = dense()
    elif config.mode == "bm25":
        base = bm25()
    else:
        base = HybridRetriever(
            dense(), bm25(), config.dense_weight, config.bm25_weight, config.rrf_k, config.candidate_depth
        )
    return _wrapped(base, config, manifest, dataset, rerankers_dir)


def _refuse_mismatch(
    index_dir: Path,
    manifest: dict,
    config: RetrieverConfig,
    embedder: Embedder | None,
    corpus_sha256: str | None,
    dataset: str | DatasetRef | None,
) -> None:
    """Raise IndexMismatchError where the index was built otherwise than ``config`` (and ``embedder``) asks."""
    settings = config.index_settings()
    if config.mode != "bm25":  # queries must be embedded as the passages were
        settings["embedding_method"] = method_of(embedder) if embedder is not None else config.embedding_method
    problems = mismatches(manifest, settings, corpus_sha256)
    if problems:
        raise IndexMismatchError(
            f"the index at {index_dir} does not match what was asked: "
            + "; ".join(problems)
            + f". Rebuild it with: {index_command(index_dir, dataset, True, config.chroma_url)}"
            + (
                ""
                if "embedding_method" in settings and "embedding_method" not in manifest
                else " (or use the settings it was built with)"
            )
        )


def _wrapped(
    base: Retriever,
    config: RetrieverConfig,
    manifest: dict,
    dataset: str | DatasetRef | None,
    rerankers_dir: str | os.PathLike | None,
) -> Retriever:
    """``base`` wrapped in a second hop (``config.second_hop``), then in a cross-encoder reranker (``config.reranker``)."""
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
        name = dataset.spec if isinstance(dataset, DatasetRef) else dataset
        scorer = CrossEncoderReranker(folder, corpus_sha256=manifest.get("corpus_sha256"), dataset=name)
        base = RerankingRetriever(base, scorer, depth=config.rerank_depth)
    return base


def open_dense(index_dir: Path, manifest: dict, url: str | None, dataset: str | DatasetRef | None = None) -> Any:
    """The collection holding the index's vectors, checked against what the manifest says they were
    built with. Errors name the store and the command that rebuilds it."""
    where = dense_store(index_dir, manifest, url, dataset)
    try:
        return where.open(built_with=built_with(manifest))
    except (IndexServerError, StorageError):
        raise
    except (IndexMissingError, IndexMismatchError) as exc:
        recorded = (manifest.get("dense_store") or {}).get("url")
        note = f" (the index was built through {recorded})" if url and recorded and recorded != url else ""
        raise type(exc)(
            f"{exc}{note}. Rebuild the index with: {index_command(index_dir, dataset, True, url)}"
        ) from None
    except Exception as exc:  # chromadb's own errors on a damaged store, or on a full disk (it writes to open)
        if not url and store.disk_full(exc, where.path):  # not damage: a --rebuild would make it worse
            then = "Free some space and run the command again (Chroma writes to its store even to read it)"
            raise store.disk_full_error(exc, where.path, then) from None
        damage = [Damage(f"{CHROMA_DIR}/", f"does not open in Chroma ({type(exc).__name__}: {exc})")]
        raise IndexCorruptError(damage_message(index_dir, damage, dataset, url)) from None


def reranker_folder(name: str, rerankers_dir: str | os.PathLike | None) -> Path:
    """The folder of a reranker given by name (under ``rerankers_dir``) or as a folder path."""
    if rerankers_dir is not None and (Path(rerankers_dir) / name).is_dir():
        return Path(rerankers_dir) / name
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    where = f" in {rerankers_dir}" if rerankers_dir is not None else ""
    raise RerankerError(f"no reranker named {name!r}{where}. Train one with: {train_command(None, name)}")
