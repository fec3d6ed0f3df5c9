"""Base for small typed configs: frozen, validated, unknown keys rejected with a clear error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from program.errors import ConfigError

T = TypeVar("T", bound="StrictConfig")


class StrictConfig(BaseModel):
    """A frozen pydantic model that forbids unknown keys.

    Use :meth:`from_mapping` to build one from user input: it turns pydantic's
    ``ValidationError`` into a :class:`ConfigError` that names every bad key.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
    # keys added after programs were saved and shipped: a saved program holds them only when set, so a program
    # built at their default saves to the same bytes (the sha256 its MANIFEST entry records) as before they were
    SAVED_ONLY_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    def saved(self) -> dict[str, Any]:
        """The config as a saved program writes it: JSON values, :attr:`SAVED_ONLY_WHEN_SET` keys only when set."""
        out = self.model_dump(mode="json")
        for key in self.SAVED_ONLY_WHEN_SET:
            if getattr(self, key) == type(self).model_fields[key].default:
                out.pop(key, None)
        return out

    @classmethod
    def from_mapping(cls: type[T], values: Mapping[str, Any] | None = None, **overrides: Any) -> T:
        data = dict(values or {})
        data.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "<root>"
                if err["type"] == "extra_forbidden":
                    problems.append(f"unknown key '{loc}'")
                else:
                    problems.append(f"{loc}: {err['msg']}")
            allowed = ", ".join(sorted(cls.model_fields))
            raise ConfigError(
                f"invalid {cls.__name__}: " + "; ".join(problems) + f" (allowed keys: {allowed})"
            ) from None

    def replace(self: T, **changes: Any) -> T:
        """A copy with ``changes`` applied, validated. Unlike :meth:`from_mapping`'s overrides (where None means
        "not given"), a None here is a value: ``replace(yes_threshold=None)`` turns the rule off."""
        data = self.model_dump()
        data.update(changes)
        return type(self).from_mapping(data)
