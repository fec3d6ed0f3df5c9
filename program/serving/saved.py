"""A saved program: JSON state + config + retriever settings, no pickles.

Loading never executes code from the file: it rebuilds the system from this package's classes
and the validated config, then loads demos and instructions. A file from another code version,
an unknown system, a bad config or a tampered digest is a :class:`ProgramFileError`.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from program import version
from program.config import StrictConfig
from program.digest import digest
from program.errors import ProgramFileError, SharpError

log = logging.getLogger(__name__)

FORMAT = "sharp-program"


@dataclass(frozen=True)
class SavedProgram:
    system: str
    config: dict
    state: dict
    retriever: dict
    lm: dict
    index_manifest: dict
    meta: dict


def without_lms(state: Any) -> Any:
    """A dumped module state with every predictor's ``lm`` slot empty (None), present in each predictor
    state (dspy's ``Predict.load_state`` reads it): what is saved, and what is loaded into a program
    that keeps its own LMs."""
    if isinstance(state, dict):
        out = {k: (None if k == "lm" else without_lms(v)) for k, v in state.items()}
        if "signature" in out and "demos" in out:
            out.setdefault("lm", None)
        return out
    if isinstance(state, list):
        return [without_lms(v) for v in state]
    return state


def save_program(
    path: str | Path,
    module: dspy.Module,
    system: str,
    retriever: dict | None = None,
    lm: dict | None = None,
    index_manifest: dict | None = None,
    meta: dict | None = None,
) -> Path:
    body = {
        "format": FORMAT,
        "code_version": version.__version__,
        "system": system,
        "config": module.config.saved()
        if isinstance(module.config, StrictConfig)
        else module.config.model_dump(mode="json"),
        "state": without_lms(module.dump_state()),
        "retriever": retriever or {},
        "lm": lm or {},
        "index_manifest": index_manifest or {},
        "meta": meta or {},
    }
    body["sha256"] = digest(body)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temp name of this writer's own: two processes saving the same program at once (parallel tune
    # workers finishing one study) each rename a whole file; the last one wins, neither fails
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(body, indent=2, default=str))
    tmp.replace(path)
    return path


def read_program(path: str | Path) -> SavedProgram:
    path = Path(path)
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProgramFileError(f"no program file at {path}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ProgramFileError(f"{path} is not a readable program file: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ProgramFileError(f"{path} is not a SHARP program file (format {body.get('format')!r})")
    recorded = body.pop("sha256", None)
    if recorded != digest(body):
        raise ProgramFileError(f"{path} was modified after it was saved (checksum mismatch); re-export it")
    if body["code_version"] != version.__version__:
        raise ProgramFileError(
            f"{path} was saved by code version {body['code_version']}, this is {version.__version__}; "
            f"install that version or recompile the program"
        )
    return SavedProgram(
        body["system"],
        body["config"],
        body["state"],
        body["retriever"],
        body["lm"],
        body["index_manifest"],
        body["meta"],
    )


def find_program(folder: str | Path) -> Path:
    """The program JSON inside an exported model's folder (``artifacts/program.json``), or any folder
    holding one."""
    folder = Path(folder)
    for candidate in (folder / "artifacts" / "program.json", folder / "program.json"):
        if candidate.is_file():
            return candidate
    for candidate in sorted(folder.rglob("*.json")):
        try:
            if json.loads(candidate.read_text()).get("format") == FORMAT:
                return candidate
        except (OSError, ValueError, AttributeError):
            continue
    raise ProgramFileError(f"no SHARP program file in {folder}")


def with_new_predictors(state: dict, module: dspy.Module) -> dict:
    """``state`` with the predictors ``module`` has gained since it was saved (SHARP's hop planner, for a
    program saved before the chain) at their uncompiled state: a program file saved by an earlier release of
    this code version keeps loading, its own predictors exactly as saved."""
    fresh = without_lms(module.dump_state())
    added = sorted(set(fresh) - set(state))
    if added:
        log.debug("the saved program predates predictor(s) %s: they start uncompiled", ", ".join(added))
    return {**{name: fresh[name] for name in added}, **state}


def load_into(saved: SavedProgram, retriever: Any) -> dspy.Module:
    """Rebuild the saved system around ``retriever`` and load its demos and instructions."""
    from program.serving.registry import build_system

    try:
        module = build_system(saved.system, retriever, saved.config)
        module.load_state(with_new_predictors(saved.state, module))
    except SharpError as exc:
        raise ProgramFileError(f"saved program does not match this code: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ProgramFileError(f"saved program state does not fit system '{saved.system}': {exc}") from None
    return module
