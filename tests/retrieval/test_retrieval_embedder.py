"""The embedding backends: the ONNX export (fp32 and int8) gives the torch model's vectors."""

from __future__ import annotations

import numpy as np
import pytest

from program.errors import ConfigError
from program.retrieval.embedder import Embedder, resolve_model_path

SENTENCES = [
    "Gustave Eiffel was a French civil engineer.",
    "The Amazon River is the largest river by discharge.",
    "Who created the Python programming language?",
    "x",
]


@pytest.fixture(scope="module")
def torch_vectors():
    return Embedder(backend="torch").encode(SENTENCES)


def test_default_model_is_the_bundled_copy():
    assert resolve_model_path("sentence-transformers/all-MiniLM-L6-v2").endswith("model")


def test_torch_vectors_are_unit_length(torch_vectors):
    assert torch_vectors.shape == (4, 384) and torch_vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(torch_vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("backend,min_cos", [("onnx", 0.9999), ("onnx-int8", 0.97)])
def test_onnx_backends_match_torch(tmp_path_factory, torch_vectors, backend, min_cos):
    cache = tmp_path_factory.getbasetemp() / "onnx-cache"  # shared by both cases: one export
    emb = Embedder(backend=backend, onnx_cache_dir=str(cache))
    vecs = emb.encode(SENTENCES, batch_size=2)  # batches of unequal lengths: padding must not matter
    assert emb.dimension == 384
    cos = (vecs * torch_vectors).sum(axis=1)
    assert cos.min() >= min_cos, cos
    assert np.array_equal(emb.encode(SENTENCES[:1]), emb.encode(SENTENCES[:1]))  # deterministic
    assert emb.encode([]).shape == (0, 384)


def test_unknown_backend():
    with pytest.raises(ConfigError, match="backend"):
        Embedder(backend="tf")


def test_token_budget_batches():
    from program.retrieval.embedder import _batches

    lengths = np.array([256, 256, 256, 100, 64, 64, 10, 10, 10, 10])
    order = np.argsort(-lengths, kind="stable")
    got = [list(b) for b in _batches(order, lengths, batch_size=4, max_tokens=512)]
    # batches are padded to their first (longest) text: 2 x 256 fit 512 tokens, then 256 + 100
    # (2 x 256 padded), then 64-token texts: 8 would fit, capped at 4; then the rest
    assert got == [[0, 1], [2, 3], [4, 5, 6, 7], [8, 9]]
    assert sum(len(b) for b in got) == len(lengths)
