"""One compile = one MLflow run: evaluate, compile (program or critic), evaluate, save, log.

:func:`run_compile` is the composition-free core: it takes a built student, examples, the
proposer LM and where to save, so tests drive it with scripted LMs. :func:`compile_from_runtime`
is what ``sharp compile`` calls: it resolves data, retriever and LMs from a Runtime first.

Interrupted compiles resume: the before/after evaluations append to JSONL files named by the
program's state (a rerun skips finished questions) and LM calls repeat from DSPy's cache. The
MLflow run of the interrupted attempt ends FAILED (KILLED on Ctrl-C), never RUNNING.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import dspy

from experiments import tracking
from experiments.reports.prompts import describe_program, render_prompts
from optimize import recording, replay
from optimize.compiler import CompileResult, compile_program, shared_retriever
from optimize.evaluate import EvalResult, evaluate
from optimize.feedback import ANSWER_METRICS, answer_feedback_metric
from optimize.gate_fitting import fit_answer_critic, round_cases
from optimize.optimizers import check_sizes, get_optimizer
from program.digest import digest
from program.errors import ConfigError
from program.lm.accounting import recording as ledger_of_calls
from program.serving.saved import save_program
from program.sharp.module import SharpRAG
from program.sharp.rounds import ACTIONS, titles_only
from program.systems.modes import retriever_overrides as system_retriever

if TYPE_CHECKING:
    from experiments.runtime import Runtime

log = logging.getLogger(__name__)

Target = Literal["program", "critic"]
# Bootstrapped demos are kept only from runs at least this good (EM is 0/1 already).
DEFAULT_THRESHOLDS = {"f1": 0.6, "em": None, "critic": 0.75}


@dataclass
class CompileJob:
    """What to compile and how; everything here is logged as run parameters."""

    system: str = "sharp"
    optimizer: str = "bootstrap"
    target: Target = "program"
    metric: str = "f1"
    name: str | None = None
    optimizer_settings: dict = field(default_factory=dict)
    metric_threshold: float | None = None
    seed: int = 0
    threads: int = 1
    # --target critic: the critic LM reads every recorded round (off: the gate alone is fitted, no judge)
    critic_reads: bool = True
    # --target critic: the recording of the train and held-out questions (made, or extended, where it lacks
    # questions); None: workspace/replay/<what the rounds read, of which questions>.jsonl
    recording: Path | None = None
    calibrator_fitted_on: dict = field(default_factory=dict)  # dataset, corpus, ranker: recorded with it
    # recorded passages -> their text (the index's): what rules over the text (spans, answer features) read
    passages: Any = titles_only
    # --target critic: the repairs recorded (None: every one); focused reads after flagged drafts
    actions: tuple[str, ...] | None = None
    freeze: tuple[str, ...] = ()  # roles whose demos and instructions the optimizer may not change

    def __post_init__(self) -> None:
        if self.metric not in ANSWER_METRICS:
            raise ConfigError(f"unknown metric {self.metric!r}; choose one of {', '.join(ANSWER_METRICS)}")
        repairs = tuple(a for a in ACTIONS if a != "draft")
        unknown = sorted(set(self.actions or ()) - set(repairs))
        if unknown:
            raise ConfigError(f"--actions: unknown repair(s) {unknown}; choose from {', '.join(repairs)}")
        if self.target not in ("program", "critic"):
            raise ConfigError(f"unknown target {self.target!r}; choose 'program', 'critic' or 'planner'")
        if self.freeze and self.target != "program":
            raise ConfigError(
                "--freeze keeps some predictors of a whole-program compile as they are; "
                "--target critic compiles the critic alone"
            )

    @property
    def program_name(self) -> str:
        return self.name or f"{self.system}-{self.target}-{self.optimizer}-{self.metric}"

    def threshold(self) -> float | None:
        if self.metric_threshold is not None:
            return self.metric_threshold
        return DEFAULT_THRESHOLDS["critic" if self.target == "critic" else self.metric]


@dataclass
class SaveInfo:
    """What the saved program records besides its state (see program.serving.saved.save_program)."""

    retriever: dict = field(default_factory=dict)
    lm: dict = field(default_factory=dict)
    index_manifest: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def save(self, path: Path, program: dspy.Module, system: str, **meta: Any) -> Path:
        """Save ``program`` at ``path`` with these records, its meta this one's and ``meta``."""
        return save_program(
            path,
            program,
            system,
            retriever=dict(self.retriever),
            lm=self.lm,
            index_manifest=self.index_manifest,
            meta={**self.meta, **meta},
        )


@dataclass
class CompileOutcome:
    path: Path
    run_id: str
    before: dict
    after: dict
    cost: dict
    critic: dict = field(default_factory=dict)
    module: Any = None  # the compiled program itself (what was saved)


class _Compiled(NamedTuple):
    """What a compile made: the program, what the optimizer did, the scores before and after, the critic's
    report (--target critic)."""

    program: dspy.Module
    result: CompileResult
    before: EvalResult
    after: EvalResult
    critic: dict


def data_hash(*splits: Sequence[Any]) -> str:
    """A short digest of the examples (ids, questions, answers) of every split, in order."""
    body = [[[getattr(e, "id", None), e.question, getattr(e, "answer", None)] for e in split] for split in splits]
    return digest(body, 16)


def state_hash(module: dspy.Module) -> str:
    body = {
        "config": module.config.model_dump(mode="json") if hasattr(module, "config") else None,
        "state": module.dump_state(),
    }
    return digest(body, 16)


def _evaluate(module: dspy.Module, valset: Sequence[Any], out_dir: Path, label: str, threads: int) -> EvalResult:
    digest = state_hash(module)
    path = out_dir / "evals" / f"{label}-{digest}.jsonl"
    return evaluate(module, valset, path, threads=threads, progress=False, meta={"program": digest, "label": label})


def _log_program(path: Path, module: dspy.Module, result: CompileResult) -> None:
    description = describe_program(module)
    tracking.log_file(path, "program")
    tracking.log_json(description, "prompts.json")
    import mlflow

    mlflow.log_text(render_prompts(description), "prompts.md")
    tracking.log_json(
        {"optimizer": result.optimizer, "settings": result.settings, "cost": result.cost, "search": result.search},
        "optimizer.json",
    )


def _compile_critic(
    job: CompileJob, student: dspy.Module, trainset: Sequence[Any], valset: Sequence[Any], record_dir: Path
) -> tuple[dspy.Module, CompileResult, dict]:
    """Record every round of ``trainset`` and ``valset`` (the program's loop in explore mode), fit the answer
    critic's gate and judge on the train drafts, report them on the held-out drafts, and install them (with
    the accept threshold they suggest) into a copy of ``student``."""
    if not isinstance(student, SharpRAG):
        raise ConfigError(f"{type(student).__name__} has no answer critic to compile; use --system sharp")
    path, records, ledger = _record_rounds(job, student, [*trainset, *valset], record_dir)
    fit_cases = round_cases(records, trainset, student.config, job.passages)
    held_cases = round_cases(records, valset, student.config, job.passages)
    log.info(
        "answer critic: %d train drafts (%d questions), %d held-out drafts",
        len(fit_cases),
        len(trainset),
        len(held_cases),
    )
    fitted = fit_answer_critic(fit_cases, held_cases, {**job.calibrator_fitted_on, "recording": path.name}, job.seed)
    rep = fitted["report"]
    program, gate, judge = _with_fitted_critic(student, fitted)
    no_calls = {
        "lm_calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "seconds": 0.0,
        "recording": ledger.summary(),
    }
    result = CompileResult(program, "answer-critic", {"recording": str(path)}, no_calls, 0.0)
    info = {
        "recording": str(path),
        "records": records,
        "report": rep,
        "threshold": fitted["threshold"],
        "gate_features": list(gate.features),
        "judge_features": list(judge.features) if judge is not None else None,
    }
    return program, result, info


def _record_rounds(
    job: CompileJob, student: SharpRAG, questions: Sequence[Any], record_dir: Path
) -> tuple[Path, dict[str, dict], Any]:
    """Every round of ``questions`` recorded (the loop in explore mode; resumed from the file), checked to be
    read as ``student`` reads; the file, its records and the ledger of the calls it made."""
    path = job.recording or record_dir / f"{recording.reading_key(student, questions, job.calibrator_fitted_on)}.jsonl"
    with ledger_of_calls() as ledger:
        records = recording.record(
            student,
            questions,
            path,
            job.threads,
            critique=job.critic_reads,
            passages=job.passages,
            actions=job.actions,
            focus_when="flagged",
        )
    recording.check_reading(records.values(), student)
    return path, records, ledger


def _with_fitted_critic(student: SharpRAG, fitted: dict) -> tuple[SharpRAG, Any, Any]:
    """A copy of ``student`` with the fitted gate and judge (their held-out figures in ``fitted_on``) and the
    accept threshold they suggest; the copy, the gate and the judge (None: none fitted)."""
    with shared_retriever(student):
        program = student.deepcopy()
    rep = fitted["report"]
    gate = fitted["gate"].with_info(threshold=fitted["threshold"], held_out=_numbers(rep.get("gate")))
    judge = fitted["judge"].with_info(held_out=_numbers(rep.get("judge"))) if fitted["judge"] is not None else None
    # from_mapping, not replace (which keeps a setting given as None): no judge fitted replaces an old one
    fitted_policy = {"gate": gate, "judge": judge, "accept_threshold": fitted["threshold"]}
    program.config = type(program.config).from_mapping({**program.config.model_dump(), **fitted_policy})
    return program, gate, judge


def _log_critic(info: dict) -> None:
    """The answer critic's report on the held-out drafts: metrics, the JSON, and its pictures (ROC and
    reliability diagram of the gate and the judge, over- and under-trigger at the threshold)."""
    import mlflow

    from experiments.reports.plots import critic_figures

    rep = info["report"]
    views = ("gate", "judge", "critic_alone", "gate_on_critiqued", "generator_confidence")
    mlflow.log_metrics(tracking.numeric({k: _numbers(rep.get(k)) for k in views if rep.get(k)}, "critic."))
    mlflow.log_params({"critic.threshold": info["threshold"], "critic.gate_features": ",".join(info["gate_features"])})
    tracking.log_json({k: v for k, v in info.items() if k != "records"}, "critic_report.json")
    for name, fig in critic_figures(rep).items():
        mlflow.log_figure(fig, f"critic/{name}.png")


def _numbers(metrics: dict | None) -> dict:
    return {k: round(v, 4) for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and v is not None}


def run_compile(
    job: CompileJob,
    student: dspy.Module,
    trainset: Sequence[Any],
    valset: Sequence[Any],
    *,
    out_dir: Path,
    programs_dir: Path,
    save: SaveInfo | None = None,
    proposer_lm: Any = None,
    task_lm: Any = None,
    params: dict | None = None,
    selectset: Sequence[Any] | None = None,
) -> CompileOutcome:
    """Evaluate ``student`` on ``valset``, compile it on ``trainset``, evaluate again, save, and log all of
    it as one MLflow run (tracking must be configured). Returns where the program was saved.

    ``selectset``: the questions an optimizer that selects candidates on a validation set (MIPROv2,
    bootstrap-rs, GEPA) scores them on; held-out train questions, so the reported ``valset`` never
    chooses the program. None: ``valset`` does both (the caller reports on a selection set).
    """
    trainset, valset = list(trainset), list(valset)
    selectset = valset if selectset is None else list(selectset)
    _check_splits(job, student, trainset, valset)
    save = save or SaveInfo()
    out_dir = out_dir / job.program_name
    run_params = _run_params(job, student, trainset, valset, selectset, params)
    tags = {"kind": "compile", "system": job.system, "optimizer": job.optimizer, "target": job.target}
    with tracking.run(f"compile {job.program_name}", params=run_params, tags=tags) as active:
        import mlflow

        if save.lm:
            tracking.log_json(save.lm, "lm_config.json")
        if job.target == "program":
            done = _compile_whole_program(job, student, trainset, valset, selectset, out_dir, proposer_lm, task_lm)
        else:
            done = _compile_answer_critic(job, student, trainset, valset, out_dir)
        tracking.log_eval(done.after, "after.")
        mlflow.log_metrics(tracking.numeric(_gains(done.before, done.after), "gain."))
        return _save_compiled(
            job, done, programs_dir / f"{job.program_name}.json", save, active.info.run_id, run_params
        )


def _save_compiled(
    job: CompileJob, done: _Compiled, path: Path, save: SaveInfo, run_id: str, run_params: dict
) -> CompileOutcome:
    """Save the compiled program (its meta: the run, the job, the splits' sizes and digest as the run records
    them, the before and after headlines), log it with its prompts and what the optimizer used, and say what
    came out."""
    path = save.save(
        path,
        done.program,
        job.system,
        run_id=run_id,
        **{k: run_params[k] for k in ("optimizer", "target", "metric", "n_train", "n_val", "data_hash")},
        before=_headline(done.before),
        after=_headline(done.after),
    )
    _log_program(path, done.program, done.result)
    before, after = done.before.metrics, done.after.metrics
    log.info("saved %s (F1 %.3f -> %.3f)", path, before["f1"] or 0, after["f1"] or 0)
    return CompileOutcome(path, run_id, before, after, done.result.cost, done.critic, done.program)


def _gains(before: EvalResult, after: EvalResult) -> dict:
    """After less before, of the answer and evidence metrics both have."""
    return {
        k: after.metrics[k] - before.metrics[k]
        for k in ("em", "f1", "all_gold", "recall")
        if after.metrics.get(k) is not None and before.metrics.get(k) is not None
    }


def _check_splits(job: CompileJob, student: dspy.Module, trainset: list, valset: list) -> None:
    if not valset:
        raise ConfigError("the validation split is empty: compile evaluates before and after on it (--n-val)")
    if job.target == "program":
        check_sizes(job.optimizer, len(trainset), len(valset))
    elif len(trainset) < 2:
        raise ConfigError(
            f"critic compilation fits on the drafts of the train split: give it at least 2 questions, got {len(trainset)}"
        )
    if (
        job.target == "critic"
        and not job.critic_reads
        and getattr(getattr(student, "config", None), "ask_critic", "off") != "off"
    ):
        raise ConfigError(
            f"the critic reads no recorded round (critic_reads off), but the program asks it (ask_critic="
            f"{student.config.ask_critic!r}): its rounds could not be replayed; set ask_critic=off or let the critic read"
        )


def _run_params(
    job: CompileJob, student: dspy.Module, trainset: list, valset: list, selectset: list, params: dict | None
) -> dict:
    """The compile run's MLflow params: the job, the split sizes and their digest, the student's config."""
    return {
        "system": job.system,
        "optimizer": job.optimizer,
        "target": job.target,
        "metric": job.metric,
        "metric_threshold": job.threshold(),
        "seed": job.seed,
        "critic_reads": job.critic_reads,
        "freeze": ",".join(job.freeze) or "-",
        "n_train": len(trainset),
        "n_val": len(valset),
        "n_select": len(selectset),
        "select_is_val": selectset == valset,
        "data_hash": data_hash(trainset, valset, selectset),
        "opt": job.optimizer_settings,
        "config": student.config.model_dump(mode="json") if hasattr(student, "config") else {},
        **(params or {}),
    }


def _compile_whole_program(
    job: CompileJob,
    student: dspy.Module,
    trainset: list,
    valset: list,
    selectset: list,
    out_dir: Path,
    proposer_lm: Any,
    task_lm: Any,
) -> _Compiled:
    """--target program: evaluate ``student`` live on ``valset`` (logged), compile it with the job's optimizer
    on ``trainset`` (candidates chosen on ``selectset``; the task LM by default the student's), log what the
    optimizer used and spent, evaluate the compiled program live."""
    if task_lm is None:
        task_lm = next((p.lm for _, p in student.named_predictors() if p.lm is not None), None)
    before = _evaluate(student, valset, out_dir, "before", job.threads)
    tracking.log_eval(before, "before.")
    result = compile_program(
        student,
        job.optimizer,
        trainset,
        selectset,
        metric=ANSWER_METRICS[job.metric],
        feedback_metric=answer_feedback_metric(job.metric),
        proposer_lm=proposer_lm,
        task_lm=task_lm,
        overrides=job.optimizer_settings,
        metric_threshold=job.threshold(),
        seed=job.seed,
        freeze=job.freeze,
    )
    _log_compile_result(result)
    after = _evaluate(result.program, valset, out_dir, "after", job.threads)
    return _Compiled(result.program, result, before, after, {})


def _compile_answer_critic(
    job: CompileJob, student: dspy.Module, trainset: list, valset: list, out_dir: Path
) -> _Compiled:
    """--target critic: fit the answer critic (:func:`_compile_critic`), score before and after on the held-out
    questions by replay of the same recording (exact, no LM call), log its report."""
    import mlflow

    compiled, result, critic_info = _compile_critic(job, student, trainset, valset, out_dir / "replay")
    records = critic_info.pop("records")
    # a policy that asks the critic is replayed without it where the held-out recording holds no critiques
    critiqued = all(records[ex.id].get("critiqued", True) for ex in valset if ex.id in records)
    before_policy, after_policy = student.config, compiled.config
    if not critiqued:
        before_policy, after_policy = before_policy.replace(ask_critic="off"), after_policy.replace(ask_critic="off")
        mlflow.set_tag("critic.replayed_off", "the held-out recording has no critiques")
    before = replay.score(records, valset, before_policy, passages=job.passages)
    tracking.log_eval(before, "before.")
    after = replay.score(records, valset, after_policy, passages=job.passages)
    _log_critic(critic_info)
    _log_compile_result(result)
    return _Compiled(compiled, result, before, after, critic_info)


def _log_compile_result(result: CompileResult) -> None:
    """What the optimizer used (params ``opt_used.*``) and spent (metrics ``compile.*``)."""
    import mlflow

    mlflow.log_params(tracking.flatten({"opt_used": result.settings}))
    mlflow.log_metrics(tracking.numeric(result.cost, "compile."))


def _headline(result: EvalResult) -> dict:
    return {k: result.metrics.get(k) for k in ("em", "f1", "all_gold", "lm_calls_per_q", "n")}


# ---- composition from a Runtime (the CLI path) -------------------------------------------------------
def proposer_for(runtime: Runtime, optimizer: str) -> Any:
    """The proposer LM (role 'proposer' of the LM config) when the optimizer proposes instructions."""
    from program.lm.factory import build_lm

    if not get_optimizer(optimizer).needs_proposer:
        return None
    return build_lm(runtime.lm_config.resolve("proposer"), "proposer")


def save_info(runtime: Runtime, retriever_overrides: dict | None = None, meta: dict | None = None) -> SaveInfo:
    return SaveInfo(
        retriever=runtime.retriever_settings(retriever_overrides).model_dump(mode="json"),
        lm=runtime.lm_config.model_dump(mode="json", exclude_none=True),
        index_manifest=runtime.index_manifest(),
        meta={"dataset": runtime.dataset, "index_dir": str(runtime.index_dir()), **(meta or {})},
    )


def split_train_val(examples: Sequence[Any], **sizes: int) -> tuple[list, ...]:
    """Consecutive disjoint slices of ``examples``, one per named size, in order."""
    examples = list(examples)
    if len(examples) < sum(sizes.values()):
        asked = " + ".join(f"{n} {name}" for name, n in sizes.items() if n)
        raise ConfigError(f"asked for {asked} questions, the split has {len(examples)}")
    out, start = [], 0
    for n in sizes.values():
        out.append(examples[start : start + n])
        start += n
    return tuple(out)


def compile_from_runtime(
    runtime: Runtime,
    job: CompileJob,
    *,
    n_train: int,
    n_val: int,
    train_offset: int = 0,
    val_split: str = "train",
    program_path: str | Path | None = None,
    system_config: dict | None = None,
    n_select: int | None = None,
) -> CompileOutcome:
    """``sharp compile``: sample train/val questions, build the student, compile, save, log.

    An optimizer that selects on a validation set gets ``n_select`` train questions of its own
    (default: as many as ``n_val``), disjoint from the ones it trains on and from the reported ones.
    """
    check_sizes_early(job, n_train, n_val)
    selects = job.target == "program" and get_optimizer(job.optimizer).uses_valset
    n_sel = (n_val if n_select is None else n_select) if selects else 0
    if selects and n_sel < 1:
        raise ConfigError(f"{job.optimizer!r} selects candidates on held-out train questions: --n-select must be >= 1")
    skip = max(0, train_offset)
    trainset, selectset, valset = _sample(runtime, job.seed, skip, n_train, n_sel, n_val, val_split)
    student, retriever_overrides = _student(runtime, job, program_path, system_config)
    if job.target == "critic":  # what the calibrator's features come from, recorded with it and checked on load
        job.calibrator_fitted_on = _fitted_on(runtime, retriever_overrides, skip, n_train, n_val)
        job.passages = runtime.passages()
    proposer = proposer_for(runtime, job.optimizer)
    params = {
        "dataset": runtime.dataset,
        "val_split": val_split,
        "start_program": str(program_path or ""),
        "lm": runtime.lm_config.summary(),
        "retriever": runtime.retriever_settings(retriever_overrides).model_dump(mode="json"),
    }
    ws = runtime.workspace
    return run_compile(
        job,
        student,
        trainset,
        valset,
        out_dir=ws / "compile",
        programs_dir=ws / "programs",
        save=save_info(runtime, retriever_overrides),
        proposer_lm=proposer,
        params=params,
        selectset=selectset if selects else None,
    )


def _fitted_on(runtime: Runtime, retriever_overrides: dict | None, skip: int, n_train: int, n_val: int) -> dict:
    """What a critic's calibrator is fitted on: dataset, corpus, ranker and the train questions used."""
    from program.sharp.gate import ranker_id

    return {
        "dataset": str(runtime.dataset),
        "corpus_sha256": runtime.index_manifest().get("corpus_sha256"),
        "ranker": ranker_id(runtime.retriever_settings(retriever_overrides)),
        "train_offset": skip,
        "n_train": n_train,
        "n_heldout": n_val,
    }


def _sample(
    runtime: Runtime, seed: int, skip: int, n_train: int, n_sel: int, n_val: int, val_split: str
) -> tuple[list, list, list]:
    """The train, selection and validation questions: disjoint seeded slices of train after the first
    ``skip`` (validation from ``val_split`` when it is not train)."""
    if val_split == "train":
        return split_train_val(
            runtime.examples("train", limit=skip + n_train + n_sel + n_val, seed=seed)[skip:],
            train=n_train,
            selection=n_sel,
            validation=n_val,
        )
    trainset, selectset = split_train_val(
        runtime.examples("train", limit=skip + n_train + n_sel, seed=seed)[skip:],
        train=n_train,
        selection=n_sel,
    )
    return trainset, selectset, runtime.examples(val_split, limit=n_val, seed=seed)


def _student(
    runtime: Runtime, job: CompileJob, program_path: str | Path | None, system_config: dict | None
) -> tuple[Any, dict | None]:
    """The program to compile (a saved one, which must be of ``job.system``, or a fresh one) and its
    retriever overrides."""
    if program_path:
        student, saved = runtime.load_program(program_path, system_config)
        if saved.system != job.system:
            raise ConfigError(f"{program_path} holds a {saved.system!r} program, not {job.system!r}")
        return student, saved.retriever
    student = runtime.system(job.system, system_config)
    return student, system_retriever(student.config)  # vanilla-dense, vanilla-hop: their own retriever


def check_sizes_early(job: CompileJob, n_train: int, n_val: int) -> None:
    """Refuse impossible sizes before loading anything."""
    get_optimizer(job.optimizer)  # an unknown optimizer is refused here
    if n_val < 1:
        raise ConfigError("--n-val must be at least 1: compile evaluates before and after on it")
    if job.target == "program":
        check_sizes(job.optimizer, n_train, n_val)
    elif n_train < 10:
        raise ConfigError(
            f"the answer critic is fitted on the drafts of the train questions: give it at least 10 (--n-train), "
            f"got {n_train}"
        )
