"""What every `sharp` command shares: the shared options, declared once, the one error exit, the options
object and the one runtime builder.

A command declares its own parameters only; the options it shares with others it names with :func:`shared`
(``@o.shared(o.WHERE, o.LMS, o.CACHE, o.TRACKING_URI)``), which puts them in its signature where its ``opts``
parameter stands, so that `sharp CMD --help` lists them and `sharp CMD ... --workspace W` parses them, and
hands their values to it as one :class:`Options`. The command gets its :class:`~experiments.runtime.Runtime`
from :func:`build_runtime`, which checks everything that can be checked before any expensive work. A
:class:`~program.errors.SharpError` raised while a command runs is turned into the error exit (:func:`fail`)
by :class:`Command`, which every command is registered with.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from typer.core import TyperCommand

from experiments.keyvalue import merged, parse_sets, read_mapping
from program.errors import SharpError
from program.serving.defaults import DEFAULT_DATASET

if TYPE_CHECKING:
    from experiments.runtime import Runtime
    from program.lm import LMConfig

F = TypeVar("F", bound=Callable[..., Any])


# ---- the shared options, declared once ----------------------------------------------------------------
@dataclass(frozen=True)
class Shared:
    """An option several commands take: the :class:`Options` field it fills (None: checked by its callback,
    then dropped), its Python type and its typer declaration. :meth:`but` is the same option with another
    default, flag or help, for a command where it means something more precise."""

    field: str | None
    annotation: Any
    info: Any  # typer's OptionInfo
    param: str = ""  # the command parameter's name (default: the field's)

    @property
    def name(self) -> str:
        return self.param or str(self.field)

    def but(self, **changes: Any) -> Shared:
        info = copy.copy(self.info)
        for key, value in changes.items():
            setattr(info, key, value)
        return replace(self, info=info)


def _set_is_not_retriever_settings(values: list[str] | None) -> None:
    if values:
        pairs = " ".join(f"--retriever-set {v}" for v in values)
        raise typer.BadParameter(
            f"this command has no system config to --set; retriever settings are --retriever-set: {pairs}"
        )


def option(annotation: Any, default: Any, *decls: str, field: str = "", **declared: Any) -> Shared:
    """A shared option: ``typer.Option(default, *decls, **declared)`` of type ``annotation``, filling the
    :class:`Options` field named after its first flag (``--data-dir``: ``data_dir``) or ``field``."""
    return Shared(
        field or decls[0].lstrip("-").replace("-", "_"), annotation, typer.Option(default, *decls, **declared)
    )


DATASET = option(
    str,
    DEFAULT_DATASET,
    "--dataset",
    "-d",
    help="hotpotqa | 2wikimultihopqa | musique | PATH (a folder with SPLIT.json and corpus.jsonl, or a question file).",
)
DATA_DIR = option(
    Path | None, None, "--data-dir", help="Datasets folder (default: $SHARP_DATA, ./datasets, ../shared/datasets)."
)
WORKSPACE = option(
    Path | None,
    None,
    "--workspace",
    help="Folder for indexes, runs, programs (default: $SHARP_WORKSPACE or ./workspace).",
)
CHROMA_URL = option(
    str | None,
    None,
    "--chroma-url",
    envvar="SHARP_CHROMA_URL",
    help="Keep the index's vectors in this Chroma server (http://127.0.0.1:8000; start one with "
    "`chroma run --path DIR --port 8000`) instead of the index folder.",
)
LM = option(
    str | None, None, "--lm", help="Default model for every role, e.g. local/qwen2.5-coder-1.5b, openai/gpt-4o-mini."
)
API_BASE = option(
    str | None, None, "--api-base", help="OpenAI-compatible endpoint for --lm (e.g. http://127.0.0.1:8008/v1)."
)
PLANNER_LM = option(str | None, None, "--planner-lm", help="Model for the planner only.")
CRITIC_LM = option(str | None, None, "--critic-lm", help="Model for the critic only (a strong critic helps most).")
GENERATOR_LM = option(str | None, None, "--generator-lm", help="Model for the generator only.")
JUDGE_LM = option(str | None, None, "--judge-lm", help="Model for LLM-as-judge metrics.")
PROPOSER_LM = option(str | None, None, "--proposer-lm", help="Model that optimizers use to propose instructions.")
LM_FILE = option(
    Path | None,
    None,
    "--lm-config",
    field="lm_file",
    help="YAML/JSON file with an LMConfig (default + per-role overrides).",
)
NO_CACHE = option(bool, False, "--no-cache", help="Do not read or write DSPy's answer cache (a cold run).")
CACHE_DIR = option(Path | None, None, "--cache-dir", help="A separate DSPy cache folder for this run.")
TRACKING_URI = option(
    str | None, None, "--tracking-uri", help="MLflow tracking URI (default: sqlite store in the workspace)."
)
EXPERIMENT = option(str, "sharp", "--experiment", help="MLflow experiment name.")
CONFIG = option(Path | None, None, "--config", help="YAML/JSON file with the system's config.")
SET = option(
    list[str] | None,
    None,
    "--set",
    field="set_",
    help="Override one key of the system's config: --set confidence_threshold=0.8 (repeatable; KEY=VALUE, "
    "the value read as YAML: 3, 0.5, true, null, [1, 2], text; a dotted KEY nests).",
)
RETRIEVER_SET = option(
    list[str] | None,
    None,
    "--retriever-set",
    help="Override one retriever setting (RetrieverConfig key) for every system's retriever: "
    "--retriever-set second_hop=true (repeatable; KEY=VALUE, the value read as YAML).",
)
RETRIEVER_FILE = option(
    Path | None, None, "--retriever-config", field="retriever_file", help="YAML/JSON file with RetrieverConfig keys."
)
RETRIEVER_MODE = option(str | None, None, "--retriever-mode", help="dense, bm25 or hybrid.")
BACKEND = option(
    str | None, None, "--backend", help="Embedding runtime: torch | onnx | onnx-int8 (default: the config's)."
)
INDEX_DIR = option(Path | None, None, "--index-dir", help="Index folder (default: WORKSPACE/indexes/<dataset>).")
# Where --set once meant retriever settings (index, retrieve, eval-retrieval): refused, pointing to
# --retriever-set, so an old command line never silently does something else. It fills no field.
SET_IS_RETRIEVER_SET = Shared(
    None,
    list[str] | None,
    typer.Option(None, "--set", hidden=True, callback=_set_is_not_retriever_settings),
    param="old_set",
)

# the groups most commands take together
WHERE = (DATASET, DATA_DIR, WORKSPACE)  # the questions, their data, the folder the command writes in
LMS = (LM, API_BASE, PLANNER_LM, CRITIC_LM, GENERATOR_LM, LM_FILE)  # the models of the system roles
CACHE = (NO_CACHE, CACHE_DIR)
SYSTEM_CONFIG = (CONFIG, SET)
# the retriever settings of the data commands (index, retrieve, eval-retrieval)
INDEX = (INDEX_DIR, BACKEND, RETRIEVER_FILE, RETRIEVER_SET, SET_IS_RETRIEVER_SET, CHROMA_URL)


def shared(*groups: Shared | Sequence[Shared]) -> Callable[[F], F]:
    """Give a command the shared options of ``groups`` (each a :class:`Shared` or a tuple of them), in its
    signature where its ``opts`` parameter stands, and call it with their values as one :class:`Options`
    in ``opts``: typer then lists and parses them as the command's own."""
    items = [s for g in groups for s in ((g,) if isinstance(g, Shared) else g)]

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        names = [p.name for p in params]
        if "opts" not in names:
            raise TypeError(f"{command.__name__} takes shared options: give it an `opts: Options` parameter")
        counts = Counter([*names, *(s.name for s in items)])
        twice = sorted(name for name, n in counts.items() if n > 1)
        if twice:
            raise TypeError(f"{command.__name__}: parameters named twice (its own or shared): {', '.join(twice)}")
        at = names.index("opts")
        added = [
            inspect.Parameter(s.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=s.info, annotation=s.annotation)
            for s in items
        ]
        params[at : at + 1] = added

        @functools.wraps(command)
        def with_options(**values: Any) -> Any:
            given = {s.field: values.pop(s.name) for s in items}
            return command(opts=Options.of(given), **values)

        with_options.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        with_options.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
        return with_options  # type: ignore[return-value]

    return decorate


# ---- the one error exit -------------------------------------------------------------------------------
def fail(message: object) -> NoReturn:
    """Print ``error: MESSAGE`` on stderr, the message literally (no markup, no emoji codes) on one line (the
    terminal wraps it; a log reader or a script gets it whole), and exit 2."""
    from rich.text import Text

    from experiments.console.terminal import err_console

    err_console.print(Text.assemble(("error:", "red"), " ", str(message)), soft_wrap=True)
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
    experiments.jobs.evaluation.failure_note; None where none did)."""
    notes = [n for n in notes if n]
    if notes:
        from rich.text import Text

        from experiments.console.terminal import err_console

        for note in notes:  # literally: a note quotes error messages, which may hold [brackets]
            err_console.print(Text.assemble(("failed questions:", "red"), " ", note))
        raise typer.Exit(1)


# ---- the options object -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    """The values of the shared options a command takes (:func:`shared`); the rest keep their defaults."""

    dataset: str = DEFAULT_DATASET
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
    experiment: str = "sharp"  # the MLflow experiment (--experiment)
    config: Path | None = None  # the system's config file (--config)
    set_: tuple[str, ...] = ()  # --set
    retriever_file: Path | None = None  # --retriever-config
    retriever_set: tuple[str, ...] = ()  # --retriever-set
    retriever_mode: str | None = None  # --retriever-mode (compile), --mode (retrieve, eval-retrieval)
    backend: str | None = None  # --backend (the data commands)
    index_dir: Path | None = None  # --index-dir (the data commands)

    @classmethod
    def of(cls, values: Mapping[str | None, Any]) -> Options:
        """The options among ``values`` (field -> value; a repeatable option's list becomes a tuple, None
        its empty tuple; a None field, an option that fills none, is left out)."""
        repeated = {k: tuple(values.get(k) or ()) for k in ("set_", "retriever_set") if k in values}
        names = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in values.items() if k in names}, **repeated})

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


# What a command's ``opts`` parameter defaults to: :func:`shared` puts the shared options in its place.
SHARED = Options()


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


def start_tracking(opts: Options, workspace: Path) -> str:
    """Point MLflow at --tracking-uri (default: the workspace's store) and --experiment; fail now when it
    cannot be used."""
    from experiments import tracking

    return tracking.configure(opts.tracking_uri, workspace, opts.experiment)


def build_runtime(
    opts: Options,
    *,
    lms: bool = True,
    extra_roles: Sequence[str] = (),
    track: bool = True,
) -> Runtime:
    """The composition of every command, in this order, each check before any expensive work: the LM
    config -> its servers answer (the system roles and ``extra_roles``; none unless ``lms``) -> the
    Runtime (retriever settings, dataset, Chroma server) -> the tracking store (unless not ``track``)."""
    lm_cfg = opts.lm_settings()
    if lms:
        check_lms(lm_cfg, *extra_roles)
    rt = runtime(opts, lm_cfg)
    if track:
        start_tracking(opts, rt.workspace)
    return rt


def program_path(ref: str | None, rt: Runtime, tracking_uri: str | None = None, system: str = "") -> Path | None:
    """The local file of --program: a path, models:/NAME/VERSION fetched from the tracking store, "none"
    (no program), "default" or nothing given for SHARP: the shipped compiled program that fits the index
    and the model (:meth:`experiments.runtime.Runtime.program_path`)."""
    return rt.program_path(ref, system, tracking_uri)
