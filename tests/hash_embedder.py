"""An embedding model without a model: HashEmbedder and the factory that stands in for the real Embedder.

Kept apart from tests/doubles.py (which re-exports both) so that a child `sharp` process (tests/child_cli.py,
tests/retrieval/test_read_only_index.py) loads only numpy for it, not DSPy and pytest: seconds per child."""

from __future__ import annotations

import hashlib
import re

import numpy as np


class HashEmbedder:
    """Bag of hashed lower-cased words (64-d): similar wording -> similar vectors. Counts calls."""

    backend = "fake"
    max_seq_length = 256

    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.encoded: list[str] = []

    def encode(self, texts, batch_size=None, progress=None) -> np.ndarray:
        texts = list(texts)
        self.encoded += texts
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int(hashlib.md5(word.encode()).hexdigest(), 16)
                out[row, h % self.dimension] += 1.0
        out += 1e-3
        if progress:
            progress(len(texts))
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class HashEmbedderFactory:
    """Stands in for program.retrieval.embedder.Embedder in data/indexing.py (and, by its ``from_config``, for
    program.retrieval.factory.shared_embedder): HashEmbedder models, each one made kept in ``made``."""

    made: list[HashEmbedder] = []

    @classmethod
    def from_config(cls, config=None) -> HashEmbedder:
        emb = HashEmbedder()
        cls.made.append(emb)
        return emb
