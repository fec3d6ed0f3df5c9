"""``program.load``: a shipped or saved program, wired to its index, ranker and LMs, from Python.

    from program import load
    qa = load("hotpotqa")               # the corpus's shipped program, ./workspace's index, the local model
    pred = qa(question="...")           # a dspy.Prediction: answer, passages, cited_ids, trace, cost
    preds = qa.batch([...], threads=4)  # one prediction per question; a failed one is an error row

The composition `sharp ask` makes (experiments/runtime.py) with the CLI's defaults (program/serving/defaults.py,
an empty :class:`~program.lm.LMConfig`), from this package alone: no CLI, no MLflow. A ``models:/`` URI is
MLflow's, resolved where MLflow lives (``experiments.export.resolve_program_path``), which gives a path.
Everything is checked before the first question: the program file (checksum, code version), the index
(built, complete, of the corpus the program was fitted on) and the LM strings (valid); an LM that cannot
be reached fails the first question with the LM layer's one-line error.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy

from program.errors import ConfigError, IndexMismatchError, ProgramFileError, SharpWarning
from program.lm import ROLES, LMConfig, LMSpec, assign_lms
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.factory import index_command, load_manifest
from program.retrieval.manifest import read_manifest
from program.serving import builds, defaults, shipped
from program.serving.batch import MAX_FAILED_IN_A_ROW, answer_all
from program.serving.registry import config_for
from program.serving.saved import SavedProgram, find_program, load_into, read_program
from program.sharp.gate import check_calibrators, ranker_id

__all__ = ["LoadInfo", "LoadedProgram", "lm_settings", "load", "model_mismatch"]

log = logging.getLogger(__name__)

# what marks a folder as a dataset (data/corpus.py CORPUS_FILE): load(FOLDER) loads the program built for it
CORPUS_FILE = "corpus.jsonl"
MLFLOW_SCHEMES = ("models:/", "runs:/", "mlflow-artifacts:/")
# the roles whose LMs answer a question (every system's predictors map to one of these)
ANSWERING_ROLES = ("planner", "critic", "generator")
# which roles' log-probabilities a fitted calibrator reads: the gate the generator's answer tokens, the
# judge those and the critic's verdict
CALIBRATOR_ROLES = {"gate": ("generator",), "judge": ("generator", "critic")}


@dataclass(frozen=True)
class LoadInfo:
    """What a loaded program is: its file, name and system, its index, and the model of each role."""

    program: Path
    name: str
    system: str
    dataset: str | None
    index: Path
    corpus_sha256: str | None
    models: dict[str, str] = field(default_factory=dict)


class LoadedProgram(dspy.Module):
    """A saved program wired to its index, ranker and LMs (what :func:`load` returns). ``program`` is the
    system itself (e.g. :class:`~program.sharp.module.SharpRAG`); ``info`` says what was loaded from where."""

    def __init__(self, program: dspy.Module, info: LoadInfo):
        super().__init__()
        self.program = program
        self.info = info

    def forward(self, question: str) -> dspy.Prediction:
        """The program's prediction: ``answer``, ``passages`` (cited first), ``cited_ids``, ``trace`` (one
        dict per step), ``cost`` (LM calls, tokens, seconds), ``stop_reason``. A question over the program's
        length limit is cut to it, with a :class:`~program.errors.SharpWarning` (and a note in the trace)."""
        limit = getattr(getattr(self.program, "config", None), "max_question_chars", None)
        length = len(" ".join(question.split())) if isinstance(question, str) else 0
        if limit is not None and length > limit:
            warnings.warn(
                f"the question has {length} characters, over this program's limit of {limit}: only its first "
                f"{limit} are asked (the trace notes it). Shorten it, or raise the limit with "
                f"load(..., config={{'max_question_chars': N}})",
                SharpWarning,
                stacklevel=3,
            )
        return self.program(question=question)

    def batch(
        self,
        questions: Sequence[str | dspy.Example],
        threads: int = 1,
        max_failed_in_a_row: int | None = MAX_FAILED_IN_A_ROW,
    ) -> list[dspy.Prediction]:
        """One prediction per question, in their order, with `sharp eval`'s rules (program/serving/batch.py): each
        question within the program's budget; a question that fails is an error row (``answer`` empty,
        ``stop_reason`` "error", ``error`` the cause), never an answer; after ``max_failed_in_a_row``
        failures one after another the rest are not asked (their rows say so). ``threads`` questions run
        side by side, which helps a server or a remote model only: with the embedded local model they
        run one after another, with a warning. (dspy's own ``Module.batch`` returns None for a failed
        question and asks a slow one again after a timeout, so it is not used.)"""
        if int(threads) < 1:
            raise ConfigError(f"threads must be at least 1, got {threads}")
        asked = [q.question if isinstance(q, dspy.Example) else q for q in questions]
        return answer_all(self, asked, self._threads(int(threads)), max_failed_in_a_row, self.info.system)

    def _threads(self, threads: int) -> int:
        """``threads``, or 1 where a role's LM is the embedded model (one question at a time, said)."""
        if threads == 1:
            return 1
        local = sorted(
            {
                pred.lm.model
                for _, pred in self.program.named_predictors()
                if getattr(getattr(pred.lm, "spec", None), "is_local", False)
            }
        )
        if not local:
            return threads
        warnings.warn(
            f"threads={threads}, but the embedded model {', '.join(local)} answers one question at a time: the "
            "questions run one after another (threads help a server, `sharp lm serve --parallel N`, or a "
            "remote model: load(..., lm='openai/local', api_base='http://127.0.0.1:8008/v1'))",
            SharpWarning,
            stacklevel=3,
        )
        return 1


def load(
    program: str | os.PathLike | None = None,
    *,
    index: str | os.PathLike | None = None,
    workspace: str | os.PathLike | None = None,
    lm: str | LMSpec | LMConfig | None = None,
    api_base: str | None = None,
    roles: Mapping[str, str | Mapping[str, Any]] | None = None,
    config: Mapping[str, Any] | None = None,
    cache: bool | None = None,
) -> LoadedProgram:
    """A program ready to answer: ``qa(question=...)`` gives a ``dspy.Prediction``.

    ``program``: a corpus name (``"hotpotqa"``: its shipped program, the default), a shipped program's
    name (``"sharp-hotpotqa"``), a saved program's JSON file or an exported model's folder.
    ``index``: the index folder (default: WORKSPACE/indexes/<the program's dataset>, as `sharp index`
    builds it); ``workspace``: default $SHARP_WORKSPACE, else ./workspace.
    ``lm``: the model of every role, a LiteLLM string (``"openai/gpt-4o-mini"``) or ``local/NAME``
    (default: the embedded local model), or an LMSpec / LMConfig; ``api_base``: its OpenAI-compatible
    server; ``roles``: a role's own model (``{"critic": "openai/gpt-4o"}``, or a mapping of LMSpec keys).
    ``config``: keys of the system's config over the saved ones (validated; a key replaces the saved value);
    ``cache``: DSPy's answer cache for these LMs (default: each spec's, on).
    """
    lm_config = lm_settings(lm, api_base, roles, cache)
    ws = defaults.workspace(workspace)
    path, name, dataset = find(program, {lm_config.resolve(r).model for r in ANSWERING_ROLES}, ws)
    saved = with_config(read_program(path), config)
    dataset = dataset or saved.meta.get("dataset")
    index_dir = Path(index).expanduser() if index else default_index(dataset, ws, name)
    manifest = load_manifest(index_dir, dataset)  # none, or incomplete: the `sharp index` command that builds it
    settings = RetrieverConfig.from_mapping(saved.retriever)
    corpus = manifest.get("corpus_sha256")
    system_config = config_for(saved.system, saved.config)
    check_corpus(saved, name, settings, system_config, corpus, index_dir, ws)
    retriever = open_retriever(index_dir, settings, dataset=dataset, rerankers_dir=defaults.rerankers_dir(ws))
    module = load_into(saved, retriever)
    check_calibrators(system_config, corpus, ranker_id(settings), dataset)
    mismatch = model_mismatch(saved, system_config, lm_config, ws)
    if mismatch:
        warnings.warn(mismatch, SharpWarning, stacklevel=2)
    assign_lms(module, lm_config)
    models = {role: lm_config.resolve(role).model for role in ANSWERING_ROLES}
    info = LoadInfo(Path(path), name, saved.system, dataset, index_dir, corpus, models)
    log.info("loaded %s (%s) over %s with %s", name, saved.system, index_dir, models)
    return LoadedProgram(module, info)


def with_config(saved: SavedProgram, config: Mapping[str, Any] | None) -> SavedProgram:
    """``saved`` with ``config``'s keys over its saved config (validated; :func:`load`'s ``config=``)."""
    if not config:
        return saved
    try:
        values = config_for(saved.system, {**saved.config, **config}).model_dump(mode="json")
    except ConfigError as exc:
        raise ConfigError(f"config= over the saved {saved.system!r} program: {exc}") from None
    return replace(saved, config=values)


def lm_settings(
    lm: str | LMSpec | LMConfig | None = None,
    api_base: str | None = None,
    roles: Mapping[str, str | Mapping[str, Any]] | None = None,
    cache: bool | None = None,
) -> LMConfig:
    """The LMConfig of :func:`load`'s ``lm``, ``api_base``, ``roles`` and ``cache`` (each validated: an
    unknown role, key or model string is a ConfigError naming it)."""
    if isinstance(lm, LMConfig):
        cfg = lm
    elif isinstance(lm, LMSpec):
        cfg = LMConfig(default=lm)
    elif lm is None or isinstance(lm, str):
        cfg = LMConfig().with_overrides(lm=lm)
    else:
        raise ConfigError(f"lm= takes a model string, an LMSpec or an LMConfig, not {type(lm).__name__}")
    if api_base is not None:
        cfg = cfg.with_overrides(api_base=api_base)
    data = cfg.model_dump(exclude_none=True)
    for role, value in (roles or {}).items():
        if role not in ROLES:
            raise ConfigError(f"roles: unknown role {role!r}; roles: {', '.join(ROLES)} (lm= sets the default)")
        data[role] = {**data.get(role, {}), **({"model": value} if isinstance(value, str) else dict(value))}
    if cache is not None:
        for part in ("default", *ROLES):
            if part in data:
                data[part]["cache"] = cache
    return LMConfig.from_mapping(data)


def find(program: str | os.PathLike | None, models: set[str], ws: Path | None = None) -> tuple[Path, str, str | None]:
    """(file, name, dataset or None) of :func:`load`'s ``program``; a ProgramFileError that says what it takes."""
    text = str(defaults.DEFAULT_DATASET if program is None else program)
    if text.startswith(MLFLOW_SCHEMES):
        raise ProgramFileError(
            f"{text} is an MLflow URI, and program/ does not talk to MLflow: resolve it where MLflow lives, "
            f"`from experiments.export import resolve_program_path; load(resolve_program_path({text!r}))`, "
            f"or load the served model with mlflow.pyfunc.load_model({text!r})"
        )
    path = Path(text).expanduser()
    if path.is_file():
        return path, path.stem, None
    if path.is_dir() and (path / CORPUS_FILE).is_file():
        return corpus_program(path, models, ws or defaults.workspace())
    if path.is_dir():
        return find_program(path), path.name, None
    if isinstance(program, os.PathLike) or any(c in text for c in "/\\") or text.endswith(".json"):
        raise ProgramFileError(f"no program at {text}: give a program JSON file or an exported model's folder")
    return shipped_program(text, models, ws or defaults.workspace())


def _one_model(models: set[str]) -> str:
    return next(iter(models)) if len(models) == 1 else ", ".join(sorted(models))


def corpus_program(folder: Path, models: set[str], ws: Path) -> tuple[Path, str, str]:
    """The program built for the dataset folder ``folder`` (its corpus, as indexed in the workspace) and the
    model: the one shipped, else the one `sharp build` left in the workspace; a ProgramFileError naming the
    `sharp build` command where there is none."""
    name = folder.resolve().name
    manifest = read_manifest(defaults.index_dir(name, ws)) or {}  # no index yet: nothing was built for it
    corpus = manifest.get("corpus_sha256")
    found = builds.for_corpus(corpus, models)
    if found is not None:
        return found.path, found.name, name
    for model in sorted(models):
        built = builds.built_program(ws, name, model)
        if built is not None:
            return built, built.stem, name
    raise ProgramFileError(
        f"no program is built for the corpus in {folder} and {_one_model(models)}: "
        f"{builds.build_hint(str(folder), _one_model(models), ws, name=name)}"
    )


def shipped_program(word: str, models: set[str], ws: Path | None = None) -> tuple[Path, str, str | None]:
    """The shipped program named ``word``, or compiled on the corpus ``word``: the one for ``models``, else the
    one `sharp build` left in the workspace for them, else the corpus's program for another model (which
    :func:`load` then warns of, naming both models and the command that builds one for these)."""
    programs = shipped.shipped_programs()
    named = [s for s in programs if s.name == word]
    of_corpus = sorted(
        (s for s in programs if s.entry.get("dataset") == word.lower()), key=lambda s: s.lm not in models
    )
    if named:
        return named[0].path, named[0].name, named[0].entry.get("dataset")
    mine = [s for s in of_corpus if s.lm in models]
    built = [b for m in sorted(models) if ws and (b := builds.built_program(ws, word.lower(), m))]
    if not mine and built:
        return built[0], built[0].stem, word.lower()
    if not of_corpus:
        listed = "; ".join(f"{s.name} (corpus {s.entry.get('dataset')})" for s in programs) or "none"
        raise ProgramFileError(
            f"no shipped program is named {word!r} or compiled on the corpus {word!r} (shipped: {listed}). Give "
            f"a compiled program's file (`sharp compile` writes one), or run the uncompiled SHARP with "
            f"`sharp ask --dataset {word} QUESTION`"
        )
    found = of_corpus[0]  # another model's: load() warns, naming both (model_mismatch)
    return found.path, found.name, found.entry.get("dataset")


def default_index(dataset: str | None, ws: Path, name: str) -> Path:
    """WORKSPACE/indexes/<dataset>, for a benchmark's name; a ConfigError asking for ``index=`` otherwise."""
    if not dataset or any(c in dataset for c in "/\\") or dataset.endswith((".json", ".jsonl")):
        raise ConfigError(
            f"the program {name!r} does not name a benchmark corpus (dataset {dataset!r}), so its index cannot "
            "be found by name: pass index=DIR, the folder `sharp index` built for its corpus"
        )
    return defaults.index_dir(dataset.lower(), ws)


def check_corpus(
    saved: SavedProgram,
    name: str,
    settings: RetrieverConfig,
    config: Any,
    corpus: str | None,
    index_dir: Path,
    ws: Path,
) -> None:
    """An IndexMismatchError naming both corpora where a fitted part of the program (its evidence ranker, its
    answer calibrators) was fitted on another corpus than the index holds; a warning where only its prompts
    and demos were compiled on another."""
    fitted = (("evidence ranker", settings.ranker), ("answer gate", config.gate), ("answer judge", config.judge))
    for what, model in ((w, m) for w, m in fitted if m is not None):
        theirs = model.fitted_on.get("corpus_sha256")
        if corpus and theirs and theirs != corpus:
            dataset = model.fitted_on.get("dataset") or saved.meta.get("dataset") or "?"
            build = ""
            if dataset != "?" and not any(c in dataset for c in "/\\"):
                build = f"; build it with: {index_command(defaults.index_dir(dataset.lower(), ws), dataset)}"
            raise IndexMismatchError(
                f"the program {name!r} was fitted on dataset {dataset!r} (corpus {theirs[:12]}, its {what}), but "
                f"the index at {index_dir} holds another corpus ({index_dir.name!r}, corpus {corpus[:12]}). Load it "
                f"with index= the {dataset!r} index{build}; or load a program fitted on this corpus"
            )
    recorded = (saved.index_manifest or {}).get("corpus_sha256")
    if corpus and recorded and recorded != corpus:
        warnings.warn(
            f"the program {name!r} was compiled over another corpus (corpus {recorded[:12]}) than the index at "
            f"{index_dir} holds (corpus {corpus[:12]}): its demos and prompts come from that corpus",
            SharpWarning,
            stacklevel=3,
        )


def model_mismatch(saved: SavedProgram, config: Any, lm_config: LMConfig, ws: Path | None = None) -> str | None:
    """What the program would misjudge with these LMs, where they are not the model it was built for: its policy
    (thresholds, repairs) was tuned on that model's reads, with the `sharp build` command that builds one for
    these (its time where measured in ``ws``); a fitted calibrator reads the generator's answer-token
    log-probabilities (the judge the critic's verdict's too) as that model wrote them. None when the models are
    the same (or the program records none)."""
    if not saved.lm:
        return None
    try:
        recorded = LMConfig.from_mapping(saved.lm)
    except ConfigError:
        return None
    notes = []
    was = {recorded.resolve(r).model for r in ANSWERING_ROLES}
    now = {lm_config.resolve(r).model for r in ANSWERING_ROLES}
    if was != now:
        dataset = saved.meta.get("dataset")
        hint = (
            f"; {builds.build_hint(dataset, _one_model(now), ws or defaults.workspace())}"
            if dataset and len(now) == 1
            else ""
        )
        notes.append(
            f"the program was built for {_one_model(was)} and now runs with {_one_model(now)}: its thresholds and "
            f"repairs were tuned on the reads of {_one_model(was)}{hint}."
        )
    for part, roles in CALIBRATOR_ROLES.items():
        if getattr(config, part, None) is None:
            continue
        for role in roles:
            was_role, now_role = recorded.resolve(role).model, lm_config.resolve(role).model
            if was_role != now_role:
                notes.append(
                    f"the program's answer {part} was fitted on the log-probabilities {was_role} wrote as its {role}, "
                    f"and its {role} is now {now_role}: its P(right), and the thresholds tuned on it, may not hold. "
                    f"Refit it for this model with `sharp compile --target critic`, or run without it ({part}=null)"
                )
    return " ".join(notes) or None
