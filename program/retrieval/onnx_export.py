"""Export a sentence-transformers model's transformer to ONNX, offline, once; cache the result.

``ensure_onnx_model(folder, int8)`` returns a path to an ONNX graph whose single output is the
last hidden state (pooling happens in numpy). Steps, each cached under
``$SHARP_CACHE/onnx/<model>-<fingerprint>/`` (or ``~/.cache/sharp/onnx``):
  model.onnx       torch.onnx export (eager attention, dynamic batch and sequence axes)
  model-opt.onnx   onnxruntime transformer fusions (attention, layer norm, GELU)
  model-int8-<recipe>.onnx  int8 quantization of the optimized graph (:data:`INT8_RECIPE`); <recipe>
                   is a hash of the recipe and the onnxruntime version, so another quantization
                   method (or a quantizer that may write other bytes) gets another file
Files are written to a temporary name and renamed, so concurrent or killed exports are safe.
Needs torch + transformers (export) and the ``onnx`` package (optimization, quantization).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import warnings
from pathlib import Path

from program.errors import ModelFileError

log = logging.getLogger(__name__)

OPSET = 17

# How the int8 graph is made, and how it is meant to be run ("per-text": one text per session run,
# so the run-time activation scales are computed over that text alone). Change it, and the cache
# key changes; change EMBEDDING_METHODS["onnx-int8"] with it, so that old indexes are refused.
INT8_RECIPE = {
    "quantizer": "quantize_dynamic",
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": False,
    "activations": "per-tensor scale at run time, one text per run",
    "version": 2,
}


def default_cache_dir() -> Path:
    root = os.environ.get("SHARP_CACHE") or Path.home() / ".cache" / "sharp"
    return Path(root) / "onnx"


def _fingerprint(folder: Path) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "tokenizer.json"):
        f = folder / name
        if f.exists():
            h.update(f.read_bytes())
    for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return h.hexdigest()[:12]


def model_cache_dir(folder: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", folder.name)[:60]
    return Path(cache_dir or default_cache_dir()) / f"{slug}-{_fingerprint(folder)}"


def recipe_tag(recipe: dict | None = None) -> str:
    """A short hash of the int8 recipe and the onnxruntime version that applies it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ort_version = version("onnxruntime")
    except PackageNotFoundError:
        ort_version = "unknown"
    text = json.dumps({"recipe": recipe or INT8_RECIPE, "onnxruntime": ort_version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def ensure_onnx_model(folder: Path, int8: bool, cache_dir: str | os.PathLike | None = None) -> Path:
    target = model_cache_dir(folder, cache_dir)
    target.mkdir(parents=True, exist_ok=True)
    raw, opt = target / "model.onnx", target / "model-opt.onnx"
    q8 = target / f"model-int8-{recipe_tag()}.onnx"
    want = q8 if int8 else opt
    if want.exists():
        return want
    if not raw.exists():
        log.info("exporting %s to ONNX (once) in %s", folder, target)
        _atomic(raw, lambda tmp: _export(folder, tmp))
    if not opt.exists():
        _atomic(opt, lambda tmp: _optimize(raw, tmp, folder))
    if int8 and not q8.exists():
        log.info("quantizing %s to int8", opt.name)
        _atomic(q8, lambda tmp: _quantize(opt, tmp))
    return want


def _atomic(dest: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=dest.stem + ".", suffix=".tmp.onnx", dir=dest.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _export(folder: Path, out: Path) -> None:
    import inspect

    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        names.append("token_type_ids")

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *inputs):
            return self.inner(**dict(zip(names, inputs))).last_hidden_state

    dummy = tuple(torch.ones((2, 8), dtype=torch.long) for _ in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names + ["last_hidden_state"]}
    # The tracer warns about shape checks it freezes; they compare lengths that are equal for any
    # input here (mask and ids share one sequence length), as tests/retrieval checks numerically.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHidden(model),
            dummy,
            str(out),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def _optimize(raw: Path, out: Path, folder: Path) -> None:
    try:
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as exc:  # needs the `onnx` package
        raise ModelFileError(f"ONNX optimization needs the 'onnx' package: pip install onnx ({exc})") from exc
    cfg = json.loads((folder / "config.json").read_text())
    model_type = (
        "bert"
        if cfg.get("model_type") in ("bert", "roberta", "xlm-roberta", "mpnet")
        else cfg.get("model_type", "bert")
    )
    optimized = optimize_model(
        str(raw),
        model_type=model_type,
        num_heads=int(cfg.get("num_attention_heads", 0)),
        hidden_size=int(cfg.get("hidden_size", 0)),
        opt_level=1,
    )
    optimized.save_model_to_file(str(out))


def _quantize(opt: Path, out: Path) -> None:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelFileError(f"int8 quantization needs the 'onnx' package: pip install onnx ({exc})") from exc
    import onnx

    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))  # the quantizer logs every tensor at INFO on the root logger
    try:
        # The fused graph has contrib ops whose output types shape inference cannot name: say float.
        quantize_dynamic(
            str(opt),
            str(out),
            weight_type=QuantType[INT8_RECIPE["weight_type"]],
            per_channel=INT8_RECIPE["per_channel"],
            reduce_range=INT8_RECIPE["reduce_range"],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        root.setLevel(level)
