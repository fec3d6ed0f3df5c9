"""What every `sharp` command shares: option declarations, the one ``key=value`` grammar, the one error
exit, the options object and the one runtime builder.

A command declares its parameters with the Option constants below (typer reads them per command), turns
them into :class:`Options` with one call (``opts = o.Options.of(locals())``, first thing in its body) and
gets its :class:`~experiments.runtime.Runtime` from :func:`build_runtime`, which checks everything that can
be checked before any expensive work. A :class:`~program.errors.SharpError` raised while a command runs is
turned into the error exit (:func:`fail`) by :class:`Command`, which every command is registered with.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from typer.core import TyperCommand

from experiments.keyvalue import merged, parse_sets, read_mapping
from program.errors import SharpError

if TYPE_CHECKING:
    from experiments.runtime import Runtime
    from program.lm import LMConfig

T = TypeVar("T")

# ---- option declarations ------------------------------------------------------------------------------
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
Experiment = typer.Option("sharp", "--experiment", help="MLflow experiment name.")
Config = typer.Option(None, "--config", help="YAML/JSON file with the system's config.")
Set = typer.Option(
    None,
    "--set",
    help="Override one key of the system's config: --set confidence_threshold=0.8 (repeatable; KEY=VALUE, "
    "the value read as YAML: 3, 0.5, true, null, [1, 2], text; a dotted KEY nests).",
)
RetrieverSet = typer.Option(
    None,
    "--retriever-set",
    help="Override one retriever setting (RetrieverConfig key) for every system's retriever: "
    "--retriever-set second_hop=true (repeatable; KEY=VALUE, the value read as YAML).",
)


def _set_is_not_retriever_settings(values: list[str] | None) -> None:
    if values:
        pairs = " ".join(f"--retriever-set {v}" for v in values)
        raise typer.BadParameter(
            f"this command has no system config to --set; retriever settings are --retriever-set: {pairs}"
        )


# Where --set once meant retriever settings (index, retrieve, eval-retrieval): refused, pointing to
# --retriever-set, so an old command line never silently does something else.
SetIsRetrieverSet = typer.Option(None, "--set", hidden=True, callback=_set_is_not_retriever_settings)


# ---- the one error exit -------------------------------------------------------------------------------
def fail(message: object) -> NoReturn:
    """Print ``error: MESSAGE`` on stderr, the message literally (no markup, no emoji codes), and exit 2."""
    from rich.text import Text

    from experiments.terminal import err_console

    err_console.print(Text.assemble(("error:", "red"), " ", str(message)))
    raise typer.Exit(2)


class Command(TyperCommand):
    """A `sharp` command: a :class:`SharpError` raised while it runs is the error exit (:func:`fail`)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except SharpError as exc:
            fail(exc)


def add_command(app: typer.Typer, name: str, function: Callable[..., Any]) -> None:
    """Register ``function`` as the command ``name`` of ``app`` (as a :class:`Command`)."""
    app.command(name, cls=Command)(function)


def exit_if_failed(notes: list[str | None]) -> None:
    """After the results are shown and logged: exit 1, saying why, when questions failed (notes from
    experiments.evaluation.failure_note; None where none did)."""
    notes = [n for n in notes if n]
    if notes:
        from rich.text import Text

        from experiments.terminal import err_console

        for note in notes:  # literally: a note quotes error messages, which may hold [brackets]
            err_console.print(Text.assemble(("failed questions:", "red"), " ", note))
        raise typer.Exit(1)


# ---- the options object -------------------------------------------------------------------------------
def pick(cls: type[T], params: Mapping[str, Any], **values: Any) -> T:
    """A ``cls`` (a dataclass or a pydantic model) from the entries of ``params`` that are its fields, with
    ``values`` over them: ``pick(ArenaSpec, locals(), systems=names)`` in a command."""
    model_fields = getattr(cls, "model_fields", None)
    names = set(model_fields) if model_fields is not None else {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{**{k: v for k, v in params.items() if k in names}, **values})


@dataclass(frozen=True)
class Options:
    """The options commands share; a command's parameters of these names fill it (:meth:`of`)."""

    dataset: str = "hotpotqa"
    data_dir: Path | None = None
    workspace: Path | None = None
    lm_file: Path | None = None  # --lm-config
    lm: str | None = None
    api_base: str | None = None
    planner_lm: str | None = None
    critic_lm: str | None = None
    generator_lm: str | None = None
    judge_lm: str | None = None
    proposer_lm: str | None = None
    no_cache: bool = False
    cache_dir: Path | None = None
    chroma_url: str | None = None
    tracking_uri: str | None = None
    config: Path | None = None  # the system's config file (--config)
    set_: tuple[str, ...] = ()  # --set
    retriever_file: Path | None = None  # --retriever-config
    retriever_set: tuple[str, ...] = ()  # --retriever-set
    retriever_mode: str | None = None  # --retriever-mode (compile), --mode (retrieve, eval-retrieval)
    backend: str | None = None  # --backend (the data commands)
    index_dir: Path | None = None  # --index-dir (the data commands)

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Options:
        """The options among a command's parameters: call ``Options.of(locals())`` first in its body."""
        repeated = {k: tuple(params.get(k) or ()) for k in ("set_", "retriever_set") if k in params}
        return pick(cls, params, **repeated)

    def lm_settings(self) -> LMConfig:
        roles = {r: getattr(self, r) for r in ("planner_lm", "critic_lm", "generator_lm", "judge_lm", "proposer_lm")}
        return lm_config(self.lm_file, self.lm, self.api_base, **roles)

    def system_config(self) -> dict[str, Any]:
        """--config, then each --set over it."""
        return merged(read_mapping(self.config), parse_sets(self.set_, "--set"))

    def retriever_settings(self) -> dict[str, Any]:
        """--retriever-config, then each --retriever-set, then --mode / --backend (RetrieverConfig keys)."""
        values = merged(read_mapping(self.retriever_file), parse_sets(self.retriever_set, "--retriever-set"))
        flags = {"mode": self.retriever_mode, "backend": self.backend}
        return {**values, **{k: v for k, v in flags.items() if v is not None}}


def lm_config(
    lm_file: Path | None = None, lm: str | None = None, api_base: str | None = None, **roles: str | None
) -> LMConfig:
    from program.lm import LMConfig

    base = LMConfig.from_mapping(read_mapping(lm_file))
    return base.with_overrides(lm=lm, api_base=api_base, **{k: v for k, v in roles.items() if v is not None})


# ---- the one runtime builder --------------------------------------------------------------------------
# The roles whose LMs answer questions (every system's predictors map to one of these).
SYSTEM_ROLES = ("planner", "critic", "generator")


def check_lms(lm_cfg: LMConfig, *extra_roles: str) -> None:
    """Fail now, before any index or model is loaded, when an LM server these roles call is not there."""
    from program.lm.probe import check_endpoints

    check_endpoints(lm_cfg, (*SYSTEM_ROLES, *extra_roles))


def runtime(opts: Options, lm_cfg: LMConfig) -> Runtime:
    """The Runtime of ``opts``. Checked here, before any work: the retriever settings, the dataset (one
    resolution of --dataset for every command) and the Chroma server, if any (--chroma-url, else
    $SHARP_CHROMA_URL)."""
    from experiments import rankers, settings
    from experiments.runtime import Runtime
    from program.retrieval import RetrieverConfig
    from program.retrieval.store import check_server

    retriever = opts.retriever_settings()  # a malformed KEY=VALUE fails before the workspace is made
    workspace = settings.workspace(opts.workspace)
    retriever = rankers.resolve(retriever, workspace, opts.dataset)  # ranker=NAME: its numbers
    chroma_url = opts.chroma_url or os.environ.get("SHARP_CHROMA_URL")
    if chroma_url:
        retriever["chroma_url"] = chroma_url
    cfg = RetrieverConfig.from_mapping(retriever)  # an unknown key or a bad value fails now, naming the keys
    rt = Runtime(
        dataset=opts.dataset,
        data_dir=opts.data_dir,
        workspace=workspace,
        lm_config=lm_cfg,
        retriever_config=retriever,
        cache=not opts.no_cache,
        cache_dir=opts.cache_dir,
        index_path=opts.index_dir,
    )
    rt.source  # noqa: B018 - an unknown dataset name or a missing path fails here
    if cfg.chroma_url:
        check_server(cfg.chroma_url, rt.index_dir())
    return rt


def start_tracking(opts: Options, workspace: Path, experiment: str = "sharp") -> str:
    """Point MLflow at --tracking-uri (default: the workspace's store); fail now when it cannot be used."""
    from experiments import tracking

    return tracking.configure(opts.tracking_uri, workspace, experiment)


def build_runtime(
    opts: Options,
    *,
    lms: bool = True,
    extra_roles: Sequence[str] = (),
    track: bool = True,
    experiment: str = "sharp",
) -> Runtime:
    """The composition of every command, in this order, each check before any expensive work: the LM
    config -> its servers answer (the system roles and ``extra_roles``; none unless ``lms``) -> the
    Runtime (retriever settings, dataset, Chroma server) -> the tracking store (unless not ``track``)."""
    lm_cfg = opts.lm_settings()
    if lms:
        check_lms(lm_cfg, *extra_roles)
    rt = runtime(opts, lm_cfg)
    if track:
        start_tracking(opts, rt.workspace, experiment)
    return rt


def program_path(ref: str | None, rt: Runtime, tracking_uri: str | None = None, system: str = "") -> Path | None:
    """The local file of --program: a path, models:/NAME/VERSION fetched from the tracking store, "none"
    (no program), "default" or nothing given for SHARP: the shipped compiled program that fits the index
    and the model (:meth:`experiments.runtime.Runtime.program_path`)."""
    return rt.program_path(ref, system, tracking_uri)
