"""Which LM each role uses: one default spec plus partial per-role overrides.

Roles: ``planner``, ``critic``, ``generator`` (predictors of a program), ``judge`` (an LM-as-judge
metric), ``proposer`` (the LM an optimizer uses to propose instructions), and ``default``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import field_validator

from program.config import StrictConfig
from program.errors import ConfigError
from program.lm.specs import LMSpec, parse_model_string

ROLES: tuple[str, ...] = ("planner", "critic", "generator", "judge", "proposer")
DEFAULT_ROLE = "default"
FALLBACK_ROLE = "generator"
# Fields that describe *where* a model lives: not inherited from the default by a role that
# names another model (a remote critic must not inherit the default's local api_base).
_CONNECTION_FIELDS = ("api_base", "api_key_env")


class LMOverride(StrictConfig):
    """A partial :class:`LMSpec`: only the fields given replace the default's."""

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    num_retries: int | None = None
    retry_backoff_s: float | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    cache: bool | None = None
    n_ctx: int | None = None
    n_threads: int | None = None

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return str(parse_model_string(v))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


def _as_mapping(v: Any) -> Any:
    return {"model": v} if isinstance(v, str) else v


class LMConfig(StrictConfig):
    """``default`` plus optional overrides per role. A bare string anywhere means ``{model: ...}``."""

    default: LMSpec = LMSpec()
    planner: LMOverride | None = None
    critic: LMOverride | None = None
    generator: LMOverride | None = None
    judge: LMOverride | None = None
    proposer: LMOverride | None = None

    @field_validator("default", "planner", "critic", "generator", "judge", "proposer", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return _as_mapping(v)

    def resolve(self, role: str = DEFAULT_ROLE) -> LMSpec:
        """The full spec for ``role``; an invalid merged value is a ConfigError naming the role."""
        if role == DEFAULT_ROLE:
            return self.default
        if role not in ROLES:
            raise ConfigError(f"unknown LM role {role!r}; roles: {', '.join((DEFAULT_ROLE, *ROLES))}")
        override: LMOverride | None = getattr(self, role)
        if override is None:
            return self.default
        given = override.model_dump(exclude_none=True)
        merged = self.default.model_dump()
        if "model" in given and given["model"] != self.default.model:
            for key in _CONNECTION_FIELDS:
                merged[key] = None
        merged.update(given)
        try:
            return LMSpec.from_mapping(merged)
        except ConfigError as exc:
            raise ConfigError(f"LM role {role!r}: {exc}") from None

    def with_overrides(self, lm: str | None = None, api_base: str | None = None, **role_models: str | None) -> LMConfig:
        """Apply CLI flags: ``lm`` (--lm) and ``api_base`` (--api-base) set the default; ``planner_lm``
        (--planner-lm), ``critic_lm``, ``generator_lm``, ``judge_lm``, ``proposer_lm`` set one role's model."""
        data = self.model_dump(exclude_none=True)
        if lm is not None or api_base is not None:
            default = dict(data["default"])
            if lm is not None and lm != default["model"]:
                for key in _CONNECTION_FIELDS:
                    default.pop(key, None)
                default["model"] = lm
            if api_base is not None:
                default["api_base"] = api_base
            data["default"] = default
        for flag, model in role_models.items():
            role = flag[:-3] if flag.endswith("_lm") else None
            if role not in ROLES:
                flags = ", ".join(f"{r}_lm" for r in ROLES)
                raise ConfigError(f"unknown LM override {flag!r}; use lm, api_base, {flags}")
            if model is not None:
                data[role] = {**data.get(role, {}), "model": model}
        return LMConfig.from_mapping(data)

    def summary(self) -> dict[str, str]:
        """Role -> model string, for logs and run parameters."""
        return {role: self.resolve(role).model for role in (DEFAULT_ROLE, *ROLES)}


_INDEX = re.compile(r"\[.*?\]")


def role_of(predictor_name: str, module: Any = None) -> str:
    """The role of a named predictor: its first dotted segment if that is a role, else the module's
    ``ROLE_MAP`` entry for that segment, else ``generator``."""
    first = _INDEX.sub("", predictor_name.split(".", 1)[0])
    if first in ROLES:
        return first
    role_map = getattr(type(module), "ROLE_MAP", None) if module is not None else None
    if isinstance(role_map, dict) and first in role_map:
        role = role_map[first]
        if role not in ROLES:
            raise ConfigError(
                f"{type(module).__name__}.ROLE_MAP[{first!r}] = {role!r} is not a role ({', '.join(ROLES)})"
            )
        return role
    return FALLBACK_ROLE


def assign_lms(module: Any, lm_config: LMConfig | None) -> dict[str, str]:
    """Set each predictor's ``lm`` by role (``None`` clears them). Returns predictor name -> role.

    One LM object per distinct (role, spec) is shared by the predictors of that role; local
    models are loaded once per process whatever the number of roles using them.
    """
    from program.lm.factory import build_lm

    built: dict[tuple[str, LMSpec], Any] = {}
    roles: dict[str, str] = {}
    for name, pred in module.named_predictors():
        role = role_of(name, module)
        roles[name] = role
        if lm_config is None:
            pred.lm = None
            continue
        spec = lm_config.resolve(role)
        if (role, spec) not in built:
            built[(role, spec)] = build_lm(spec, role)
        pred.lm = built[(role, spec)]
    return roles
