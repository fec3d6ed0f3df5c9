"""The one ``KEY=VALUE`` grammar of every repeatable option (--set, --retriever-set, --opt, --fix, --figure),
the merge of such values over a config file's, and the reading of that file. Pure: no CLI, no runtime."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from program.errors import ConfigError

_NULLS = {"", "~", "null", "Null", "NULL"}


def parse_sets(items: Iterable[str] | None, option: str = "--set") -> dict[str, Any]:
    """The ``KEY=VALUE`` items of a repeatable option (--set, --retriever-set, --opt, --fix) as a mapping.

    The one grammar of every such option: the value is read as YAML (3, 0.5, true, null, [1, 2],
    {a: 1}, plain text; JSON reads the same; a date stays text), a dotted key nests
    (``crag.upper=0.7`` -> ``{"crag": {"upper": 0.7}}``), a later item wins. No ``=``, an empty key
    or a value YAML cannot read is a :class:`ConfigError` naming ``option`` and the item."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise ConfigError(f"{option} takes KEY=VALUE (a dotted KEY nests: a.b=1), got {item!r}")
        target = out
        for i, part in enumerate(path[:-1]):
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{option} {item!r}: {'.'.join(path[: i + 1])} is already set to a value")
        target[path[-1]] = _value(raw, option, item)
    return out


def _value(raw: str, option: str, item: str) -> Any:
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise ConfigError(
            f"{option} {item!r}: the value is not valid YAML ({problem}); quote text that holds ': ' or "
            f"starts with a symbol, e.g. {option} '{item.partition('=')[0]}=\"...\"'"
        ) from None
    if isinstance(value, (datetime.date, datetime.datetime)) or (value is None and raw.strip() not in _NULLS):
        return raw.strip()  # a date, or text YAML reads as a comment (#1): the text itself
    return value


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, nested mappings merged key by key (a config file, then --set)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def read_mapping(path: str | Path | None, what: str = "config file") -> dict:
    """The mapping a YAML/JSON file holds ({} for no file); an unreadable file, or one holding another value, is
    a ConfigError naming it as ``what``."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping, not {type(data).__name__}")
    return data
