"""A compiled program's prompts for people: per predictor its instructions and demos, as JSON
(``prompts.json``) and Markdown (``prompts.md``), logged with each compile."""

from __future__ import annotations

from typing import Any

import dspy


def describe_program(module: dspy.Module) -> dict[str, dict]:
    """Per predictor: its instructions and demos (JSON-ready), for humans and artifacts."""
    out = {}
    for name, pred in module.named_predictors():
        out[name] = {
            "instructions": pred.signature.instructions,
            "fields": list(pred.signature.fields),
            "demos": [_plain(d) for d in pred.demos],
        }
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "toDict"):
        return _plain(value.toDict())
    return str(value)


def render_prompts(description: dict[str, dict]) -> str:
    """Markdown of :func:`describe_program`: one section per predictor."""
    lines = ["# Compiled prompts", ""]
    for name, info in description.items():
        lines += [
            f"## {name}",
            "",
            "### Instructions",
            "",
            info["instructions"].strip(),
            "",
            f"### Demos ({len(info['demos'])})",
            "",
        ]
        for i, demo in enumerate(info["demos"], 1):
            lines.append(f"**Demo {i}**{' (bootstrapped)' if demo.get('augmented') else ''}")
            lines.append("")
            for key, value in demo.items():
                if key == "augmented":
                    continue
                text = value if isinstance(value, str) else repr(value)
                lines.append(f"- `{key}`: {text[:1500]}")
            lines.append("")
    return "\n".join(lines)
