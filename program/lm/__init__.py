"""Language models for SHARP: specs, per-role configuration, accounted DSPy LMs, local models.

    from program.lm import LMConfig, assign_lms, build_lm
    cfg = LMConfig().with_overrides(lm="local/qwen2.5-coder-1.5b", critic_lm="openai/gpt-4o-mini")
    assign_lms(program, cfg)                    # each predictor gets its role's LM
    judge = build_lm(cfg.resolve("judge"), "judge")

Every call made through these LMs appends a :class:`CallRecord` to the open ledgers
(:func:`recording`). Local models need the ``local`` extra (llama-cpp-python + weight packages).
"""

from program.lm.accounting import CallRecord, Ledger, record, recording, summarize
from program.lm.cache import cold_cache, use_cache_dir
from program.lm.factory import SharpLM, build_lm
from program.lm.failures import LMContextOverflowError, LMEmptyReplyError, is_service_failure, redact
from program.lm.local_files import (
    get_local_model,
    model_cache_dir,
    model_path,
    model_status,
)
from program.lm.roles import (
    DEFAULT_ROLE,
    ROLES,
    LMConfig,
    LMOverride,
    assign_lms,
    role_of,
)
from program.lm.specs import (
    DEFAULT_MODEL,
    LOCAL_MODELS,
    SERVED_MODEL,
    LMSpec,
    LocalModel,
    ModelRef,
    parse_model_string,
)

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_ROLE",
    "LOCAL_MODELS",
    "ROLES",
    "SERVED_MODEL",
    "CallRecord",
    "LMConfig",
    "LMContextOverflowError",
    "LMEmptyReplyError",
    "LMOverride",
    "LMSpec",
    "Ledger",
    "LocalModel",
    "ModelRef",
    "SharpLM",
    "assign_lms",
    "build_lm",
    "cold_cache",
    "get_local_model",
    "is_service_failure",
    "model_cache_dir",
    "model_path",
    "model_status",
    "parse_model_string",
    "record",
    "recording",
    "redact",
    "role_of",
    "summarize",
    "use_cache_dir",
]
