"""The arena: several systems on the same questions, resumable, one MLflow parent run, one report.

Each system's per-question rows go to ``<workspace>/reports/arena-<name>/results/<system>.jsonl``
through :func:`optimize.evaluate.evaluate` (with the settings as the file's meta), so an
interrupted arena continues where it stopped, and a system whose file already holds every
question answered is not built, let alone rerun (a failed question is retried). The report (tables, plots) is rebuilt from the files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments import tracking
from experiments.jobs.evaluation import evaluate_shown, settings_of
from experiments.reports import summary as report
from experiments.runtime import as_run
from optimize.evaluate import EvalResult, ResultsMismatchError, is_failed, read_rows
from optimize.metrics import question_row
from optimize.stats import paired_bootstrap
from program.digest import digest
from program.errors import ConfigError, ModelFileError, SharpError
from program.serving.registry import SYSTEMS, UnknownSystemError, config_for, system_names
from program.serving.saved import read_program
from program.systems.modes import retriever_overrides

if TYPE_CHECKING:
    from experiments.runtime import Runtime

log = logging.getLogger(__name__)

BASELINES = ("vanilla", "vanilla-hybrid", "vanilla-dense")
_SLUG = re.compile(r"[A-Za-z0-9._-]+")


class ResultsMissingError(SharpError, FileNotFoundError):
    """A report was asked of an arena that has no results yet."""


@dataclass(frozen=True)
class ArenaSpec:
    systems: tuple[str, ...]
    split: str = "dev"
    limit: int | None = None
    seed: int = 0
    balanced: bool = False
    name: str | None = None
    baseline: str | None = "vanilla"
    judge: bool = False
    threads: int = 1
    # interleave: every unfinished system answers the first `step` questions, then the first 2*step, ...;
    # a stopped arena then has every system on a common prefix of the sample (paired differences hold)
    step: int | None = None
    # rebuild the report from the result files as they are (partial systems included); run nothing
    report_only: bool = False
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # 'all' skips a system whose model cannot be loaded here (the report says why); a system named
    # explicitly must run, so its missing model is an error before any question is answered
    skip_unavailable: bool = False
    # saved (compiled, tuned) programs as entrants beside the systems: entrant name -> program file
    programs: Mapping[str, str] = field(default_factory=dict)
    # write the report into this subfolder of the arena folder (results stay shared), so a second view
    # of the same arena (e.g. compiled programs against their baselines) keeps the main report
    report: str | None = None
    # also keep each system's compact rows (optimize.evaluate.compact_row) in this folder, to commit; a run
    # resumes from them and --report-only rebuilds the report from them on a machine without the workspace
    results_dir: Path | None = None


@dataclass
class ArenaResult:
    folder: Path
    report: Path
    summary: dict
    results: dict[str, EvalResult]
    paths: dict[str, Path]
    ran: list[str]
    reused: list[str]
    skipped: dict[str, str] = field(default_factory=dict)


def resolve_systems(systems: str | Sequence[str]) -> tuple[str, ...]:
    """'all' or a comma list -> registered names, in order, without repeats (unknown -> error listing all)."""
    names = systems.split(",") if isinstance(systems, str) else list(systems)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:
        return tuple(system_names())
    if not names:
        raise ConfigError(f"no system named; pass --systems all or some of: {', '.join(system_names())}")
    for n in names:
        if n not in SYSTEMS:
            raise UnknownSystemError(f"unknown system '{n}'; valid systems: {', '.join(system_names())} (or 'all')")
    return tuple(dict.fromkeys(names))


def check_configs(
    configs: Mapping[str, Any], names: Sequence[str], programs: Mapping[str, Path] | None = None
) -> dict[str, dict]:
    """Per-entrant config overrides ({system or program entrant: {key: value}}), each validated: a system's
    against its config class, a program entrant's over the program's own config (experiments.runtime.as_run)."""
    programs = programs or {}
    out = {}
    for name, values in (configs or {}).items():
        if name not in SYSTEMS and name not in programs:
            raise UnknownSystemError(
                f"config given for unknown system '{name}'; valid systems: {', '.join(system_names())}"
                + (f"; program entrants: {', '.join(programs)}" if programs else "")
            )
        if not isinstance(values, Mapping):
            raise ConfigError(f"the config of '{name}' must be a mapping of keys to values, not {values!r}")
        if name in programs:
            as_run(read_program(programs[name]), values)
        else:
            config_for(name, values)
        out[name] = dict(values)
    unused = set(out) - set(names) - set(programs)
    if unused:
        log.warning("configs given for systems not in this arena (ignored): %s", ", ".join(sorted(unused)))
    return out


def check_programs(programs: Mapping[str, Any], names: Sequence[str]) -> dict[str, Path]:
    """Program entrants (name -> file): a name must not shadow a system or repeat, a file must exist."""
    out: dict[str, Path] = {}
    for name, path in (programs or {}).items():
        if not _SLUG.fullmatch(str(name)):
            raise ConfigError(f"program entrant name {name!r} must be letters, digits, '.', '_' or '-'")
        if name in SYSTEMS or name in names:
            raise ConfigError(f"program entrant '{name}' has the name of a system; name it NAME=PATH")
        if not Path(path).is_file():
            raise ConfigError(f"program entrant '{name}': no program file at {path}")
        out[str(name)] = Path(path)
    return out


def report_folder(folder: Path, report_name: str | None) -> Path:
    if not report_name:
        return folder
    if not _SLUG.fullmatch(report_name) or report_name == "results":
        raise ConfigError(f"report name {report_name!r} must be letters, digits, '.', '_' or '-' (and not 'results')")
    return folder / report_name


def arena_name(dataset: str, spec: ArenaSpec, retriever: Mapping[str, Any] | None = None) -> str:
    """The arena's folder name: given, or from dataset, split, limit, seed, the sample's options and (when
    the runtime overrides retriever settings, e.g. --retriever-set second_hop=true) their digest, so an
    arena on other retrieval never resumes into this one's result files."""
    if spec.name:
        return spec.name
    return (
        f"{Path(dataset).stem}-{spec.split}-{spec.limit or 'all'}-s{spec.seed}"
        + ("-bal" if spec.balanced else "")
        + ("-judge" if spec.judge else "")
        + (f"-r{digest(dict(retriever), 6)}" if retriever else "")
    )


def pick_baseline(spec: ArenaSpec, names: Sequence[str]) -> str | None:
    if spec.baseline in names:
        return spec.baseline
    found = next((b for b in BASELINES if b in names), None)
    log.warning("baseline %r is not in this arena; paired differences use %s", spec.baseline, found or "nothing")
    return found


def is_finished(path: Path, examples: list, compact: Path | None = None) -> bool:
    """Every question answered (a failed question is not: the system is built again to retry it)."""
    rows = finished_rows(path, [e.id for e in examples], compact)
    return len(rows) == len(examples) and not any(is_failed(r) for r in rows)


def compact_file(spec: ArenaSpec, system: str) -> Path | None:
    return _compact_in(spec.results_dir, system)


def _compact_in(results_dir: Path | None, system: str) -> Path | None:
    """Where ``system``'s compact rows are kept in ``results_dir`` (None: no such folder)."""
    return Path(results_dir) / f"{system}.jsonl" if results_dir else None


class _NotRerun:
    """Stands in for a finished system: evaluate() only reads its file; calling it is a bug."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, **_: Any) -> Any:
        raise RuntimeError(f"system {self.name} is finished and must not be rerun")


def _judge(rt: Runtime, spec: ArenaSpec, judge: Any) -> Any:
    if not spec.judge:
        return None
    if judge is None:
        from optimize.llm_judge import Judge
        from program.lm import assign_lms

        judge = Judge()
        assign_lms(judge, rt.lm_config)
    return judge


@contextlib.contextmanager
def _maybe_run(track: bool, name: str, **kw: Any) -> Iterator[None]:
    if not track:
        yield
        return
    with tracking.run(name, **kw):
        yield


def run_arena(
    rt: Runtime, spec: ArenaSpec, *, track: bool = True, progress: bool = True, judge: Any = None
) -> ArenaResult:
    """Run (or resume) every system of ``spec`` on the same questions; write and log the report.

    ``rt`` is an experiments.runtime.Runtime (or anything with its examples/system/retriever
    methods); with ``track`` the caller has pointed MLflow somewhere (tracking.configure).
    """
    names, programs, configs, baseline = _entrants(spec)
    examples = rt.examples(spec.split, spec.limit, spec.seed, spec.balanced)
    if not examples:
        raise ConfigError(f"no questions in {rt.dataset} {spec.split} (limit {spec.limit})")
    name, folder, out, title = _arena_place(rt, spec, len(examples))
    if spec.report_only:
        return report_from_files(
            folder, names, examples, baseline, title, spec.seed, out=out, results_dir=spec.results_dir
        )
    judge = _judge(rt, spec, judge)
    row_fn = _row_fn(judge)
    settings = _entrant_settings(rt, spec, names, examples, configs, programs, judge)
    retrievers: dict[str, Any] = {}  # shared by the entrants built with the same retriever settings
    modules, skipped = _build_all(
        rt, names, configs, examples, folder, retrievers, spec.skip_unavailable, programs, spec.results_dir
    )
    names = tuple(n for n in names if n not in skipped)
    if baseline in skipped:
        baseline = None
    params = _arena_params(rt, spec, name, names, baseline, len(examples), programs)
    with _maybe_run(
        track, f"arena-{name}" + (f"-{spec.report}" if spec.report else ""), params=params, tags={"kind": "arena"}
    ):
        passes = _Passes(spec, names, modules, settings, examples, folder, row_fn, progress)
        if spec.step:
            _interleave(passes, report_as=(title, baseline, track, out))
        results, paths, ran, reused = _run_entrants(passes, track, judge is not None, baseline)
        md, summary = report.write_report(
            out, {s: r.rows for s, r in results.items()}, baseline, title, spec.seed, skipped=skipped
        )
        if track:
            _log_report(out)
    return ArenaResult(out, md, summary, results, paths, ran, reused, skipped)


def _arena_place(rt: Runtime, spec: ArenaSpec, n_questions: int) -> tuple[str, Path, Path, str]:
    """The arena's name, its folder (results), its report's folder and the report's title."""
    name = arena_name(rt.dataset, spec, getattr(rt, "retriever_config", None))
    folder = Path(rt.workspace) / "reports" / f"arena-{name}"
    title = f"Arena {name}: {n_questions} {Path(rt.dataset).stem} {spec.split} questions"
    return name, folder, report_folder(folder, spec.report), title


def _row_fn(judge: Any) -> Any:
    """The function scoring each question's row: question_row, judged by ``judge`` when there is one."""
    if judge is None:
        return question_row
    from optimize.llm_judge import judged_row

    return judged_row(question_row, judge)


def _entrants(spec: ArenaSpec) -> tuple[tuple[str, ...], dict[str, Path], dict, str | None]:
    """The arena's entrants, checked: names (the baseline first, program entrants last), program files,
    configs and baseline."""
    names = resolve_systems(spec.systems)
    programs = check_programs(spec.programs, names)
    configs = check_configs(spec.configs, names, programs)
    if spec.step is not None and spec.step < 1:
        raise ConfigError(f"step must be a positive number of questions, not {spec.step}")
    baseline = pick_baseline(spec, names)
    if baseline:  # first, so each later system's run can log its paired difference to it
        names = (baseline, *[n for n in names if n != baseline])
    return (*names, *programs), programs, configs, baseline


def _results_file(folder: Path, system: str) -> Path:
    """Where an arena in ``folder`` keeps ``system``'s rows."""
    return folder / "results" / f"{system}.jsonl"


@dataclass(frozen=True)
class _Passes:
    """What every pass over the entrants reads: the arena's spec, the entrants in order, the built
    modules (absent: finished earlier), each entrant's settings, the questions, the arena's folder,
    the row function and whether to show progress."""

    spec: ArenaSpec
    names: Sequence[str]
    modules: Mapping[str, Any]
    settings: Mapping[str, dict]
    examples: list
    folder: Path
    row_fn: Any
    progress: bool


def _run_entrants(
    p: _Passes, track: bool, judged: bool, baseline: str | None
) -> tuple[dict[str, EvalResult], dict[str, Path], list[str], list[str]]:
    """Evaluate each entrant in turn (one nested MLflow run each; one finished earlier is read, not rerun).

    Returns the results and results files by system, and the systems run and reused."""
    results, paths, ran, reused = {}, {}, [], []
    for system in p.names:
        path = _results_file(p.folder, system)
        if system not in p.modules:
            module, _ = _NotRerun(system), reused.append(system)
            log.info("%s: finished earlier (%s); not rerun", system, path)
        else:
            module, _ = p.modules[system], ran.append(system)
            log.info("%s: %d questions; results in %s", system, len(p.examples), path)
        with _maybe_run(track, system, params=p.settings[system], tags={"system": system}, nested=True):
            result = _evaluate(module, p.examples, path, p.spec, p.settings[system], p.row_fn, p.progress)
            base_rows = results[baseline].rows if baseline and system != baseline else None
            _add_metrics(result, p.spec, judged, base_rows)
            if track:
                tracking.log_eval(result)
                tracking.log_file(path, artifact_path="results")
        results[system], paths[system] = result, path
    return results, paths, ran, reused


def _entrant_settings(
    rt: Runtime,
    spec: ArenaSpec,
    names: Sequence[str],
    examples: list,
    configs: Mapping[str, Any],
    programs: Mapping[str, Path],
    judge: Any,
) -> dict[str, dict]:
    """What decides each entrant's results; nothing is built (a program entrant's is read from its file)."""
    return {
        n: settings_of(
            rt,
            n,
            spec.split,
            examples,
            config=configs.get(n) if n in programs else config_for(n, configs.get(n, {})).model_dump(mode="json"),
            program=(n, programs[n]) if n in programs else None,
            judge=judge,
        )
        for n in names
    }


def _arena_params(
    rt: Runtime,
    spec: ArenaSpec,
    name: str,
    names: Sequence[str],
    baseline: str | None,
    n_questions: int,
    programs: Mapping[str, Path],
) -> dict[str, Any]:
    """The arena's parent MLflow run params."""
    return {
        "arena": name,
        "systems": list(names),
        "dataset": rt.dataset,
        "split": spec.split,
        "limit": spec.limit,
        "seed": spec.seed,
        "balanced": spec.balanced,
        "baseline": baseline,
        "judge": spec.judge,
        "n_questions": n_questions,
        "lm": rt.lm_config.summary(),
        "programs": {n: str(p) for n, p in programs.items()},
        "report": spec.report,
    }


def _add_metrics(result: EvalResult, spec: ArenaSpec, judged: bool, baseline_rows: list | None) -> None:
    """Add the judge's means (when ``judged``) and the paired differences to the baseline's rows (when given)."""
    if judged:
        result.metrics.update({k: report.column_mean(result.rows, k) for k in report.JUDGE_KEYS})
    if baseline_rows is not None:
        result.metrics.update(paired_metrics(result.rows, baseline_rows, spec.seed))


def _log_report(folder: Path) -> None:
    for f in sorted(folder.iterdir()):
        if f.is_file():
            tracking.log_file(f, artifact_path="report")


def _evaluate(
    module: Any,
    examples: list,
    path: Path,
    spec: ArenaSpec,
    settings: dict,
    row_fn: Any,
    progress: bool,
    label: str | None = None,
) -> EvalResult:
    """One system on these questions, resuming its result file (a file of other settings: a hint), with a
    progress display (experiments/console/progress.py)."""
    system = Path(path).stem
    try:
        return evaluate_shown(
            module,
            examples,
            path,
            label=label or system,
            progress=progress,
            threads=spec.threads,
            meta=settings,
            seed=spec.seed,
            row_fn=row_fn,
            compact_path=compact_file(spec, system),
        )
    except ResultsMismatchError as exc:
        raise ResultsMismatchError(f"{exc}; or give this arena another --name") from None


def _interleave(p: _Passes, report_as: tuple[str, str | None, bool, Path]) -> None:
    """Bring every unfinished system to the first ``step`` questions, then to the first 2*step, ...
    (the last stage, all questions, is the arena's ordinary pass). The result files and their meta
    are the ones the full pass uses, so stages resume like it. After each stage the report is
    rebuilt from the files (and logged to the arena's MLflow run), so a long arena can be read
    while it runs."""
    title, baseline, track, out = report_as
    spec, examples = p.spec, p.examples
    for stop in range(spec.step, len(examples), spec.step):
        for system in p.names:
            if system not in p.modules:
                continue
            log.info("%s: stage of the first %d of %d questions", system, stop, len(examples))
            _evaluate(
                p.modules[system],
                examples[:stop],
                _results_file(p.folder, system),
                spec,
                p.settings[system],
                p.row_fn,
                p.progress,
                label=f"{system} (stage: first {stop})",
            )
        if any(system in p.modules for system in p.names):
            report_from_files(
                p.folder, p.names, examples, baseline, title, spec.seed, out=out, results_dir=spec.results_dir
            )
            log.info("stage of %d done; report so far: %s", stop, out / "summary.md")
            if track:
                _log_report(out)


def finished_rows(path: Path, ids: Sequence[str], compact: Path | None = None) -> list[dict]:
    """The rows of a result file (completed by its compact copy) for these question ids, in their order."""
    by_id = read_rows(path, compact)
    return [by_id[i] for i in ids if i in by_id]


def report_from_files(
    folder: Path,
    names: Sequence[str],
    examples: list,
    baseline: str | None,
    title: str,
    seed: int = 0,
    out: Path | None = None,
    results_dir: Path | None = None,
) -> ArenaResult:
    """The report of an arena as its files stand: no model, index or LM is touched. A system with some
    questions answered is reported on those (its n says how many; its paired differences are on the
    questions it shares with the baseline); a system with none is listed as not run yet. The report
    goes to ``out`` (default: the arena folder)."""
    out = out or folder
    ids = [e.id for e in examples]
    rows, paths, pending = {}, {}, {}
    for system in names:
        path = _results_file(folder, system)
        got = finished_rows(path, ids, _compact_in(results_dir, system))
        if got:
            rows[system], paths[system] = got, path
        else:
            pending[system] = "no question answered yet"
    if not rows:
        raise ResultsMissingError(f"no results in {folder / 'results'} for {', '.join(names)}; run the arena first")
    partial = {s: len(r) for s, r in rows.items() if len(r) < len(ids)}
    if partial:
        title += " (partial: " + ", ".join(f"{s} {n} of {len(ids)}" for s, n in partial.items()) + ")"
    md, summary = report.write_report(out, rows, baseline if baseline in rows else None, title, seed, skipped=pending)
    return ArenaResult(out, md, summary, {}, paths, [], list(rows), pending)


def _build_all(
    rt: Runtime,
    names: Sequence[str],
    configs: Mapping[str, Any],
    examples: list,
    folder: Path,
    retrievers: dict[str, Any],
    skip_unavailable: bool,
    programs: Mapping[str, Path],
    results_dir: Path | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Build every system that still has questions to answer, before any is run: a model that cannot be
    loaded is an error now (or, with ``skip_unavailable``, a system left out with its reason)."""
    modules: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for system in names:
        compact = _compact_in(results_dir, system)
        if is_finished(_results_file(folder, system), examples, compact):
            continue
        try:
            if system in programs:
                modules[system] = rt.load_program(programs[system], configs.get(system))[0]
            else:
                modules[system] = _build(rt, system, configs.get(system, {}), retrievers)
        except ModelFileError as exc:
            if not skip_unavailable:
                raise
            skipped[system] = str(exc)
            log.warning("%s: not run, its model cannot be loaded here: %s", system, exc)
    return modules, skipped


def paired_metrics(rows: list[dict], base_rows: list[dict], seed: int = 0) -> dict:
    """d_em / d_f1 (this system minus the baseline, same questions) with paired 95% CIs."""
    out: dict[str, Any] = {}
    for key in ("em", "f1"):
        p = paired_bootstrap({r["id"]: r[key] for r in rows}, {r["id"]: r[key] for r in base_rows}, seed=seed)
        if p:
            out[f"d_{key}"], out[f"d_{key}_ci"] = p["diff"], list(p["ci"])
    return out


def _build(rt: Runtime, system: str, values: Mapping[str, Any], retrievers: dict[str, Any]) -> Any:
    """The system, sharing one retriever per retrieval mode across the arena."""
    if not getattr(SYSTEMS[system][0], "NEEDS_RETRIEVER", True):
        return rt.system(system, values)
    overrides = retriever_overrides(config_for(system, values))
    key = json.dumps(overrides, sort_keys=True) if overrides else "default"
    if key not in retrievers:
        retrievers[key] = rt.retriever(overrides)
    return rt.system(system, values, retriever=retrievers[key])
