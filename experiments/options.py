"""CLI options shared by every command, and turning them into a Runtime."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
import yaml

from program.errors import ConfigError

DataDir = typer.Option(
    None, "--data-dir", help="Datasets folder (default: $SHARP_DATA, ./datasets, ../shared/datasets)."
)
Workspace = typer.Option(
    None, "--workspace", help="Folder for indexes, runs, programs (default: $SHARP_WORKSPACE or ./workspace)."
)
Dataset = typer.Option(
    "hotpotqa",
    "--dataset",
    "-d",
    help="hotpotqa | 2wikimultihopqa | musique | PATH (a folder with SPLIT.json and corpus.jsonl, or a question file).",
)
ChromaUrl = typer.Option(
    None,
    "--chroma-url",
    envvar="SHARP_CHROMA_URL",
    help="Keep the index's vectors in this Chroma server (http://127.0.0.1:8000; start one with "
    "`chroma run --path DIR --port 8000`) instead of the index folder.",
)
LM = typer.Option(None, "--lm", help="Default model for every role, e.g. local/qwen2.5-coder-1.5b, openai/gpt-4o-mini.")
ApiBase = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for --lm (e.g. http://127.0.0.1:8008/v1).")
PlannerLM = typer.Option(None, "--planner-lm", help="Model for the planner only.")
CriticLM = typer.Option(None, "--critic-lm", help="Model for the critic only (a strong critic helps most).")
GeneratorLM = typer.Option(None, "--generator-lm", help="Model for the generator only.")
JudgeLM = typer.Option(None, "--judge-lm", help="Model for LLM-as-judge metrics.")
ProposerLM = typer.Option(None, "--proposer-lm", help="Model that optimizers use to propose instructions.")
LMConfigFile = typer.Option(None, "--lm-config", help="YAML/JSON file with an LMConfig (default + per-role overrides).")
NoCache = typer.Option(False, "--no-cache", help="Do not read or write DSPy's answer cache (a cold run).")
CacheDir = typer.Option(None, "--cache-dir", help="A separate DSPy cache folder for this run.")
TrackingUri = typer.Option(None, "--tracking-uri", help="MLflow tracking URI (default: sqlite store in the workspace).")
Config = typer.Option(None, "--config", help="YAML/JSON file with the system's config.")
Set = typer.Option(
    None, "--set", help="Override one config key: --set confidence_threshold=0.8 (repeatable; JSON values)."
)
RetrieverSet = typer.Option(
    None,
    "--retriever-set",
    help="Override one retriever setting for every system's "
    "retriever: --retriever-set second_hop=true (repeatable; RetrieverConfig keys).",
)


def read_mapping(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping, not {type(data).__name__}")
    return data


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set takes key=value, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        target = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    return out


def lm_config(
    lm_file: Path | None = None, lm: str | None = None, api_base: str | None = None, **roles: str | None
) -> Any:
    from program.lm import LMConfig

    base = LMConfig.from_mapping(read_mapping(lm_file))
    return base.with_overrides(lm=lm, api_base=api_base, **{k: v for k, v in roles.items() if v is not None})


# The roles whose LMs answer questions (every system's predictors map to one of these).
SYSTEM_ROLES = ("planner", "critic", "generator")


def check_lms(lm_cfg: Any, *extra_roles: str) -> None:
    """Fail now, before any index or model is loaded, when an LM server these roles call is not there."""
    from program.lm.probe import check_endpoints

    check_endpoints(lm_cfg, (*SYSTEM_ROLES, *extra_roles))


def exit_if_failed(notes: list[str | None]) -> None:
    """After the results are shown and logged: exit 1, saying why, when questions failed (notes from
    experiments.evaluation.failure_note; None where none did)."""
    notes = [n for n in notes if n]
    if notes:
        from experiments.render import err_console

        for note in notes:
            err_console.print(f"[red]failed questions:[/red] {note}")
        raise typer.Exit(1)


def runtime(
    dataset: str,
    data_dir: Path | None,
    workspace: Path | None,
    lm_cfg: Any,
    no_cache: bool = False,
    cache_dir: Path | None = None,
    retriever: dict | None = None,
    chroma_url: str | None = None,
) -> Any:
    """The composition root for a command. Checked here, before any work: the ``retriever`` settings,
    the dataset (one resolution of --dataset for every command) and the Chroma server, if any
    (``chroma_url``, else $SHARP_CHROMA_URL)."""
    from experiments import settings
    from experiments.runtime import Runtime
    from program.retrieval import RetrieverConfig
    from program.retrieval.store import check_server

    retriever = dict(retriever or {})
    chroma_url = chroma_url or os.environ.get("SHARP_CHROMA_URL")
    if chroma_url:
        retriever["chroma_url"] = chroma_url
    cfg = RetrieverConfig.from_mapping(retriever)  # an unknown key or a bad value fails now, naming the keys
    rt = Runtime(
        dataset=dataset,
        data_dir=data_dir,
        workspace=settings.workspace(workspace),
        lm_config=lm_cfg,
        retriever_config=retriever,
        cache=not no_cache,
        cache_dir=cache_dir,
    )
    rt.source  # noqa: B018 - an unknown dataset name or a missing path fails here
    if cfg.chroma_url:
        check_server(cfg.chroma_url, rt.index_dir())
    return rt
