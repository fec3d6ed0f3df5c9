"""The embedding backends: the ONNX export (fp32 and int8) gives the torch model's vectors, and a
text embeds to the same bits alone and inside any batch (the real bundled MiniLM model)."""

from __future__ import annotations

import numpy as np
import pytest

from program.errors import ConfigError
from program.retrieval.config import EMBEDDING_METHODS, RetrieverConfig
from program.retrieval.embedder import Embedder, method_of, resolve_model_path

SENTENCES = [
    "Gustave Eiffel was a French civil engineer.",
    "The Amazon River is the largest river by discharge.",
    "Who created the Python programming language?",
    "x",
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory) -> str:
    """One ONNX export for the whole module (both backends share it)."""
    return str(tmp_path_factory.mktemp("onnx-cache"))


@pytest.fixture(scope="module")
def torch_vectors():
    return Embedder(backend="torch").encode(SENTENCES)


def test_default_model_is_the_bundled_copy():
    assert resolve_model_path("sentence-transformers/all-MiniLM-L6-v2").endswith("model")


def test_torch_vectors_are_unit_length(torch_vectors):
    assert torch_vectors.shape == (4, 384) and torch_vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(torch_vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("backend,min_cos", [("onnx", 0.9999), ("onnx-int8", 0.97)])
def test_onnx_backends_match_torch(onnx_cache, torch_vectors, backend, min_cos):
    emb = Embedder(backend=backend, onnx_cache_dir=onnx_cache)
    vecs = emb.encode(SENTENCES)
    assert emb.dimension == 384
    cos = (vecs * torch_vectors).sum(axis=1)
    assert cos.min() >= min_cos, cos
    assert np.array_equal(emb.encode(SENTENCES[:1]), emb.encode(SENTENCES[:1]))  # deterministic
    assert emb.encode([]).shape == (0, 384)


def test_unknown_backend():
    with pytest.raises(ConfigError, match="backend"):
        Embedder(backend="tf")


# Texts of many lengths: a few words, a sentence, a paragraph, one over 128 tokens (truncated).
WORDS = [
    "the",
    "river",
    "flows",
    "north",
    "through",
    "the",
    "old",
    "city",
    "where",
    "the",
    "engineer",
    "built",
    "a",
    "bridge",
    "in",
    "1832",
]
FILLERS = [" ".join(WORDS[: 1 + (i * 7) % len(WORDS)] * (1 + i % 9)) for i in range(70)]
TARGETS = [
    "Who designed the Eiffel Tower?",
    "Gustave Eiffel was a French civil engineer born in Dijon in 1832; his company built the tower.",
    "x",
]


def _batches_with(target: str, rng: np.random.Generator) -> list[tuple[list[str], int]]:
    """(batch, position of target) for batches of 1, 7 and 64 texts of other lengths, shuffled."""
    out = []
    for size in (1, 7, 64):
        others = [FILLERS[i] for i in rng.choice(len(FILLERS), size - 1, replace=False)]
        pos = int(rng.integers(0, size))
        out.append((others[:pos] + [target] + others[pos:], pos))
    out.append(([max(FILLERS, key=len), target, target, FILLERS[0]], 2))  # a duplicate and the longest filler
    return out


@pytest.mark.parametrize("backend", ["onnx-int8", "onnx"])
def test_a_text_embeds_to_the_same_bits_alone_and_in_any_batch(onnx_cache, backend):
    emb = Embedder(backend=backend, onnx_cache_dir=onnx_cache, threads=2)
    rng = np.random.default_rng(0)
    for target in TARGETS:
        alone = emb.encode([target])[0]
        for batch, pos in _batches_with(target, rng):
            got = emb.encode(batch)[pos]
            assert np.array_equal(got, alone), (backend, target, len(batch), np.abs(got - alone).max())
    # the thread count (how texts are spread over workers) does not change a bit either
    one_thread = Embedder(backend=backend, onnx_cache_dir=onnx_cache, threads=1)
    assert np.array_equal(one_thread.encode(FILLERS[:9] + TARGETS), emb.encode(FILLERS[:9] + TARGETS))


def test_the_old_batched_int8_was_not_batch_invariant(onnx_cache):
    """Why the ONNX backends run one text at a time: the same int8 graph fed a padded batch (what
    the embedder did before) gives a text another vector than alone, since the activation scale of
    dynamic quantization is computed over the whole batch tensor. Guards the test above: it can fail."""
    emb = Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache)
    emb.encode(["load"])
    impl = emb._impl
    encs = impl.tokenizer.encode_batch([TARGETS[1], FILLERS[-1], FILLERS[3]])
    width = max(len(e.ids) for e in encs)
    ids, mask = np.zeros((3, width), np.int64), np.zeros((3, width), np.int64)
    for row, e in enumerate(encs):
        ids[row, : len(e.ids)], mask[row, : len(e.ids)] = e.ids, e.attention_mask
    hidden = impl.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids})[0]
    n = mask[0].sum()
    batched = hidden[0, :n].mean(axis=0)
    batched /= np.linalg.norm(batched)
    assert not np.allclose(batched, emb.encode([TARGETS[1]])[0], atol=1e-4)


def test_progress_counts_every_text(onnx_cache):
    emb = Embedder(backend="onnx-int8", onnx_cache_dir=onnx_cache, threads=2)
    seen: list[int] = []
    emb.encode(FILLERS, progress=seen.append)
    assert sum(seen) == len(FILLERS) and len(seen) == 2  # every 64 texts, then the rest


def test_embedding_methods_name_each_backend():
    assert set(EMBEDDING_METHODS) == {"torch", "onnx", "onnx-int8"}
    assert len(set(EMBEDDING_METHODS.values())) == 3
    for backend in EMBEDDING_METHODS:
        assert method_of(Embedder(backend=backend)) == RetrieverConfig(backend=backend).embedding_method

    class Custom:
        backend = "fake"

    assert method_of(Custom()) == "custom:fake"


def test_int8_cache_key_follows_the_quantization_recipe(tmp_path, monkeypatch):
    from program.retrieval import onnx_export

    tag = onnx_export.recipe_tag()
    assert tag == onnx_export.recipe_tag(dict(onnx_export.INT8_RECIPE))
    assert tag != onnx_export.recipe_tag({**onnx_export.INT8_RECIPE, "per_channel": False})
    assert tag != onnx_export.recipe_tag({**onnx_export.INT8_RECIPE, "version": 3})
    # the file the int8 backend loads is named by the tag (no export runs: the steps are stubbed)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    written = []

    def fake_atomic(dest, write):
        written.append(dest.name)
        dest.write_text("stub")

    monkeypatch.setattr(onnx_export, "_atomic", fake_atomic)
    path = onnx_export.ensure_onnx_model(folder, int8=True, cache_dir=tmp_path / "cache")
    assert path.name == f"model-int8-{tag}.onnx" and written == ["model.onnx", "model-opt.onnx", path.name]
    monkeypatch.setattr(onnx_export, "INT8_RECIPE", {**onnx_export.INT8_RECIPE, "version": 99})
    assert onnx_export.ensure_onnx_model(folder, int8=True, cache_dir=tmp_path / "cache") != path
