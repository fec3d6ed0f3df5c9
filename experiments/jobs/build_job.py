"""`sharp build`: a model and a corpus in, a checked program out, shipped, in one command.

The steps (experiments/jobs/build_steps.py: each skipped when its output is up to date for the same inputs, each
a nested MLflow run of the build's run), in order:

1. ``index``: the corpus's hybrid index, where it is missing (`sharp index`);
2. ``ranker``: the evidence ranker, fitted on the train questions' supporting paragraphs (`sharp fit-ranker`);
   a ranker shipped or fitted on this corpus already is kept; without supporting-paragraph labels, the hybrid order;
3. ``planner``: where the search space reaches the chain (a bridge's hop by hop repair), the hop planner's demos
   drawn from train plans (`sharp compile --target planner --optimizer labeled`, no LM call); its program is the
   base every later step reads with (the recording's reading digests include the hop planner's demos);
4. ``record``: the LM-bound part, SHARP's rounds of the train questions, every repair the policy's search space
   can reach (experiments/jobs/recording_job.py: a probe and the estimate first, ``--max-cost`` its guard);
5. ``rules``: the rules code applies to the reads, and a first policy (`sharp tune`, by replay);
6. ``gate``: the answer gate, fitted on the tuning questions' rounds settled by those rules (`sharp compile
   --target critic`; on the features that remain where the model wrote no log-probabilities);
7. ``policy``: the policy over the gate's P(right), the rules kept (`sharp tune`, by replay);
8. ``heldout``: the gate and the policy on the held-out questions (optimize/heldout.py, by replay);
9. ``register``: the built program saved as WORKSPACE/programs/NAME.json and registered in MLflow;
10. ``ship``: into program/compiled/ where it scores at least as well as the program it replaces on the same
    held-out questions (`sharp ship`'s check; ``--force`` ships anyway).

The first ``--limit`` seeded train questions (after ``--offset``) are the build's; the last ``--heldout`` of them
are held out. Nothing is chosen on dev.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import tracking
from experiments.jobs.build_steps import Stamp, Steps, file_sha256
from experiments.jobs.estimate import Estimate, logprobs_in, price_of
from experiments.jobs.recording_job import Recording, model_of, record_rounds
from optimize import recording
from optimize.heldout import critic_report, figures, policy_report
from optimize.policy_search import FLOOR_PENALTY, FORM_EM, CallCost, SearchSpace, form_em
from optimize.storage import MEMORY
from program import version
from program.digest import digest
from program.errors import ConfigError
from program.serving import builds, shipped
from program.sharp.forms import question_form

log = logging.getLogger(__name__)

STEPS = ("index", "ranker", "planner", "record", "rules", "gate", "policy", "heldout", "register", "ship")
# the smallest build: the gate is fitted on at least MIN_FIT questions' rounds, checked on MIN_HELDOUT more
MIN_FIT, MIN_HELDOUT = 10, 5
HELDOUT_SHARE = 0.3  # of the build's questions, held out where --heldout is not given
# the rules a policy keeps once fitted (the gate was fitted on rounds settled by them)
RULES = ("yes_threshold", "yes_threshold_sub", "option_form", "force_option", "span_rule", "compare_by")
NO_LOGPROBS = {"yes_threshold": "off", "yes_threshold_sub": "off"}  # P(yes) is read from log-probabilities
# ... and before a gate is fitted, every round's P(right) is the same coin flip (program.sharp.policy.UNCALIBRATED_P):
# the rules' search then picks the last round a repair reads (the most confident is always the draft, a tie)
NO_LOGPROBS_RULES = {"choose": "last"}
# the hop planner's compile: PLANNER_K demos drawn from the train plans of the corpus (its evidences) and of the
# bundled datasets the data folder holds
PLANNER_K = 4
PLANNER_DEMOS = ("musique", "2wikimultihopqa")


@dataclass
class BuildJob:
    """What `sharp build` was asked (every field is in the build's MLflow params)."""

    limit: int | None = None
    heldout: int | None = None
    offset: int = 0
    seed: int = 0
    trials: int = 300
    space_path: Path | None = None
    max_calls: float = 2.5
    threads: int = 1
    max_cost: float | None = None
    ship: bool = True
    force: bool = False
    command: str = ""  # the command line that runs this build (recorded with the shipped program)
    planner_demos: tuple[str, ...] | None = None  # the planner's demo datasets (None: found; (): no compile)
    form_floors: Path | None = None  # a program whose EM per question form on the tuning questions each search keeps
    system_config: dict = field(default_factory=dict)

    def sizes(self, available: int) -> tuple[int, int]:
        """(tuning questions, held-out questions) of the ``available`` train questions after the offset."""
        n = available if self.limit is None else min(self.limit, available)
        held = self.heldout if self.heldout is not None else max(MIN_HELDOUT, round(HELDOUT_SHARE * n))
        if n - held < MIN_FIT or held < MIN_HELDOUT:
            raise ConfigError(
                f"{n} train questions (of {available} after --offset {self.offset}) with {held} held out: too few; "
                f"a build fits on at least {MIN_FIT} and holds out at least {MIN_HELDOUT} "
                f"({MIN_FIT + MIN_HELDOUT} in all): raise --limit or lower --heldout"
            )
        return n - held, held


@dataclass
class BuildOutcome:
    name: str
    program: Path | None
    run_id: str
    steps: list
    figures: dict
    shipped: Path | None = None
    logprobs: bool | None = None
    estimate: dict | None = None


class Build:
    """One build: the runtime (the corpus, the model), the job, and what each step made."""

    def __init__(self, rt: Any, job: BuildJob, say: Callable[[str], None], show: bool = True):
        self.rt, self.job, self.say, self.show = rt, job, say, show
        self.ws = Path(rt.workspace)
        self.corpus = rt.source.name
        self.model = model_of(rt.lm_config)
        self.name = builds.program_name(self.corpus, self.model)
        tail = "" if self.name == f"sharp-{self.corpus}" else f"-{builds.model_slug(self.model)}"
        self.recording = self.ws / "recordings" / f"{self.corpus}{tail}-train.jsonl"
        self.folder = self.ws / "builds" / self.name
        self.programs = self.ws / "programs"
        self.space = SearchSpace()
        self.base: Path | None = None  # the program every step from the recording on reads with (None: uncompiled)
        self.logprobs: bool | None = None
        self.estimate: Estimate | None = None
        self.figures: dict = {}
        self.shipped: Path | None = None
        self.tune_n = self.held_n = 0
        self._floors: dict[str, float] | None = None

    # ---- the questions ------------------------------------------------------------------------
    def questions(self, start: int, n: int) -> list:
        o = self.job.offset + start
        return self.rt.examples("train", limit=o + n, seed=self.job.seed)[o:]

    @property
    def tuning(self) -> list:
        return self.questions(0, self.tune_n)

    @property
    def held_out(self) -> list:
        return self.questions(self.tune_n, self.held_n)

    def records_digest(self, examples: Sequence[Any]) -> str:
        return digest(recording.read_records(self.recording, examples), 16)

    def program(self, step: str) -> Path:
        return self.programs / f"{self.name}-{step}.json"

    # ---- the build ------------------------------------------------------------------------------
    def run(self) -> BuildOutcome:
        from experiments.jobs.tune_job import load_space

        available = len(self.rt.examples("train", limit=1 << 30, seed=self.job.seed)) - self.job.offset
        self.tune_n, self.held_n = self.job.sizes(available)
        self.space = load_space(self.job.space_path, {"ask_critic": "off"})
        steps = Steps(self.name, STEPS, self.say)
        params = {**self._params(), "steps": ",".join(STEPS)}
        with tracking.run(f"build {self.name}", params=params, tags={"kind": "build", "model": self.model}) as active:
            steps.run("index", self.step_index, self.index_fresh())
            steps.run("ranker", self.step_ranker, self.ranker_fresh())
            steps.run("planner", self.step_planner, self.planner_skip())
            steps.run("record", self.step_record, self.record_fresh())
            self._logprobs_known()
            for name in ("rules", "gate", "policy", "heldout", "register"):
                stamp, inputs = self.stamp(name), self.inputs(name)
                skip = f"up to date ({stamp.output})" if stamp.current(inputs) else None
                steps.run(name, lambda n=name, s=stamp, i=inputs: self.run_stamped(n, s, i), skip)
            self._load_figures()
            steps.run("ship", self.step_ship, self.ship_skip())
            tracking.log_metrics({f"heldout.{k}": v for k, v in self.figures.items()})
            tracking.log_json(self.summary(steps), "build.json")
            return BuildOutcome(
                self.name,
                builds.built_program(self.ws, self.corpus, self.model),
                active.info.run_id,
                steps.done,
                self.figures,
                self.shipped,
                self.logprobs,
                self.estimate.to_dict() if self.estimate else None,
            )

    def _params(self) -> dict:
        return {
            "dataset": str(self.rt.dataset),
            "corpus": self.corpus,
            "model": self.model,
            "name": self.name,
            "offset": self.job.offset,
            "tune_questions": self.tune_n,
            "heldout_questions": self.held_n,
            "trials": self.job.trials,
            "space": str(self.job.space_path or "default"),
            "max_calls": self.job.max_calls,
            "seed": self.job.seed,
            "threads": self.job.threads,
            "max_cost": self.job.max_cost,
            "recording": str(self.recording),
            "command": self.job.command,
            "form_floors": str(self.job.form_floors) if self.job.form_floors else None,
        }

    def summary(self, steps: Steps) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "corpus": self.corpus,
            "logprobs": self.logprobs,
            "estimate": self.estimate.to_dict() if self.estimate else None,
            "figures": self.figures,
            "steps": [vars(s) for s in steps.done],
            "shipped": str(self.shipped) if self.shipped else None,
        }

    # ---- 1. index ------------------------------------------------------------------------------
    def index_fresh(self) -> str | None:
        manifest = self.rt.index_manifest()
        return f"up to date ({self.rt.index_dir()})" if manifest.get("status") == "complete" else None

    def step_index(self) -> str:
        manifest = self.rt.build_index(progress=self.show)
        return f"{manifest.get('num_passages', '?')} passages indexed in {self.rt.index_dir()}"

    # ---- 2. ranker -----------------------------------------------------------------------------
    def ranker_path(self) -> Path:
        from experiments import rankers

        return rankers.rankers_dir(self.ws) / f"{self.corpus}.json"

    def ranker_fresh(self) -> str | None:
        """Why the ranker step has nothing to do: a ranker fitted on this corpus is there (shipped, fitted by
        `sharp fit-ranker` or by an earlier build), or train has no supporting-paragraph labels."""
        from experiments import rankers
        from program.retrieval.ranked import EvidenceRanker

        corpus = self.rt.index_manifest().get("corpus_sha256")
        stamp = Stamp(self.ranker_path())
        try:
            found = rankers.ranker_path(self.corpus, self.ws, str(self.rt.dataset))
        except rankers.RankerNotFoundError:
            found = None
        if found is not None and not (found == self.ranker_path() and stamp.path.is_file()):
            ranker = EvidenceRanker.from_mapping(rankers.load_ranker(self.corpus, self.ws))
            if not ranker.corpus_problem(corpus, self.corpus):
                return f"up to date ({found}, fitted on this corpus)"
        if stamp.current(self.ranker_inputs()):
            return f"up to date ({self.ranker_path()})"
        if self.labelled() < MIN_FIT:
            self.job.system_config = {**self.job.system_config, "ranker": None}
            return (
                "no supporting-paragraph labels in the train questions: the evidence ranker is left at the hybrid order"
            )
        return None

    def labelled(self) -> int:
        return sum(bool(ex.get("gold_titles")) for ex in self.rt.examples("train", limit=1 << 30))

    def ranker_inputs(self) -> dict:
        ids = [ex.id for ex in self.rt.examples("train", limit=1 << 30, seed=self.job.seed)]
        return {"corpus": self.rt.index_manifest().get("corpus_sha256"), "questions": digest(ids, 16),
                "seed": self.job.seed}  # fmt: skip

    def step_ranker(self) -> str:
        from experiments import rankers

        out = self.ranker_path()
        summary = rankers.fit_from_runtime(self.rt, out, None, self.job.seed, 1.0, {}, track=True)
        Stamp(out).write(self.ranker_inputs())
        held = summary["scores"].get("held_out") or {}
        return f"fitted on {summary['fitted_on']['n_train']} questions ({out}); held-out all-gold@3 {held.get('all_gold@3')}"

    # ---- 3. planner ----------------------------------------------------------------------------
    def planner_demo_sets(self) -> list[str]:
        """The datasets whose train plans are the planner's demos: as asked (--planner-demos), else this corpus
        and the bundled MuSiQue and 2WikiMultihopQA, those of them the data folder holds."""
        from data.errors import DatasetError
        from experiments.runtime import dataset_source

        own = str(self.rt.dataset)
        asked = self.job.planner_demos
        names = [own if n == self.corpus else n for n in (asked if asked is not None else (own, *PLANNER_DEMOS))]
        found = []
        for name in dict.fromkeys(names):
            try:
                dataset_source(name, self.rt.data_dir).split_file("train")
            except DatasetError:
                if asked is not None:
                    raise
                continue
            found.append(name)
        return found

    def planner_inputs(self) -> dict:
        return {"step": "planner", "code_version": version.__version__, "seed": self.job.seed,
                "base": digest(self.job.system_config), "model": self.model, "demos": self.planner_demo_sets(),
                "k": PLANNER_K, "offset": self.job.offset}  # fmt: skip

    def planner_skip(self) -> str | None:
        """Why the hop planner is not compiled (None: it is). Compiled, its program is the base every later
        step reads with (the recording's reading digests include the planner's demos)."""
        from experiments.jobs.planner_job import demo_pool
        from optimize.planner import plannable

        if "chain" not in self.space.actions:
            return "the search space reaches no chain (repair_bridge): the hop planner is not used"
        if self.job.planner_demos == ():
            return "not asked (--planner-demos none): the hop planner stays uncompiled"
        stamp = Stamp(self.program("planner"))
        if stamp.current(self.planner_inputs()):
            self.base = stamp.output
            return f"up to date ({stamp.output})"
        if not plannable(self.rt.examples("train", seed=self.job.seed)[self.job.offset :]):
            return "no train bridge the rules cannot plan: the planner LM plans none, it stays uncompiled"
        if not demo_pool(self.rt, self.planner_demo_sets(), self.job.seed):
            return (f"no train question in {self.rt.data_dir} with a gold or rule plan to learn from (a dataset "
                    "folder's evidences, MuSiQue's decompositions, 2Wiki's rule plans): the hop planner stays "
                    "uncompiled")  # fmt: skip
        return None

    def step_planner(self) -> str:
        """The hop planner's demos: PLANNER_K train plans of the demo datasets drawn by DSPy's LabeledFewShot (no
        LM call: a rebuild from the recording alone makes the same program). How well it plans shows in the
        held-out check's chain rounds; `sharp compile --target planner` scores plans on their own."""
        from experiments.jobs.planner_job import compile_planner

        inputs = self.planner_inputs()
        out = compile_planner(
            self.rt, optimizer="labeled", demo_datasets=inputs["demos"], n_select=0, n_val=0,
            train_offset=self.job.offset, seed=self.job.seed, settings={"k": PLANNER_K}, name=f"{self.name}-planner",
            system_config=self.job.system_config, report=False,
        )  # fmt: skip
        Stamp(out.path).write(inputs, run_id=out.run_id)
        self.base = out.path
        return f"{out.path}: {out.demos} demos from {', '.join(inputs['demos'])}"

    # ---- 4. record -----------------------------------------------------------------------------
    def base_program(self) -> Any:
        if self.base is not None:
            return self.rt.load_program(self.base, self.job.system_config)[0]
        return self.rt.system("sharp", self.job.system_config)

    def all_questions(self) -> list:
        return self.questions(0, self.tune_n + self.held_n)

    def record_fresh(self) -> str | None:
        left = recording.pending(
            self.all_questions(), self.recording, self.base_program(), self.space.actions, self.space.focus_when_needed
        )
        return None if left else f"up to date ({self.recording} holds every round the policy can reach)"

    def step_record(self) -> str:
        job = Recording(
            program=self.base_program(),
            examples=self.all_questions(),
            path=self.recording,
            passages=self.rt.passages(),
            price=price_of(self.model),
            actions=self.space.actions,
            focus_when=self.space.focus_when_needed,
            threads=self.job.threads,
            max_cost=self.job.max_cost,
            command=f"`{self.job.command}`" if self.job.command else "the same command",
        )
        done = record_rounds(job, show=self.show, on_estimate=self._estimated)
        self.note_measured(done.seconds / done.left if done.left else None)
        return (
            f"{done.left} questions recorded ({done.spent.lm_calls} LM calls, "
            f"{done.spent.prompt_tokens + done.spent.completion_tokens} tokens) into {self.recording}"
        )

    def note_measured(self, seconds_per_question: float | None) -> None:
        """Note in WORKSPACE/builds/measured.json the corpus's train questions and the model's measured speed: the
        notice where no program fits a model names the build's time from them (program/serving/builds.py)."""
        measured = builds.read_measured(self.ws)
        corpora = {**measured.get("corpora", {}), self.corpus: {"train_questions": self.tune_n + self.held_n}}
        models = dict(measured.get("models", {}))
        if seconds_per_question:
            models[self.model] = {"seconds_per_question": round(seconds_per_question, 2), "threads": self.job.threads}
        path = self.ws / "builds" / builds.MEASURED
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"corpora": corpora, "models": models}, indent=1, sort_keys=True) + "\n")

    def _estimated(self, estimate: Estimate, logprobs: bool | None) -> None:
        self.estimate, self.logprobs = estimate, logprobs
        tracking.log_metrics({f"estimate.{k}": v for k, v in estimate.to_dict().items() if v is not None})
        if logprobs is False:
            self.say(self._no_logprobs())

    def _no_logprobs(self) -> str:
        return (
            f"{self.model} returns no token log-probabilities: the gate is fitted on the features that remain "
            "(agreement between reads, spans, the answer's type, the evidence ranker's scores), and the yes/no "
            "threshold on P(yes) is left off; the first search keeps the last round a repair reads (every P(right) a coin "
            "flip until the gate is fitted)"
        )

    def _logprobs_known(self) -> None:
        """Whether the reader wrote log-probabilities (from the records where nothing was recorded now); without
        them the policy's searches leave the P(yes) threshold off."""
        if self.logprobs is None:
            self.logprobs = logprobs_in(recording.read_records(self.recording, self.all_questions()).values())
            if self.logprobs is False:
                self.say(self._no_logprobs())
        if self.logprobs is False:
            self.space = self.space.model_copy(update={"fixed": {**self.space.fixed, **NO_LOGPROBS}})
        tracking.log_params({"logprobs": self.logprobs})

    # ---- 5-9. the steps by replay, stamped -------------------------------------------------------
    def stamp(self, name: str) -> Stamp:
        if name == "heldout":
            return Stamp(self.folder / "heldout.json")
        if name == "register":
            return Stamp(builds.built_path(self.ws, self.corpus, self.model), self.folder / "register.inputs.json")
        return Stamp(self.program(name if name != "gate" else "critic"))

    def inputs(self, name: str) -> dict:
        common = {"step": name, "code_version": version.__version__, "seed": self.job.seed}
        tune = {"space": self.space.model_dump(mode="json"), "trials": self.job.trials, "max_calls": self.job.max_calls}
        if name in ("rules", "policy") and self.job.form_floors is not None:
            tune.update(floors=self.floors(), floor_penalty=FLOOR_PENALTY)
        if name == "rules":
            base = file_sha256(self.base) if self.base else digest(self.job.system_config)
            return {**common, **tune, "base": base, "model": self.model, "questions": [e.id for e in self.tuning],
                    "records": self.records_digest(self.tuning), "pins": self.rules_pins()}  # fmt: skip
        if name == "gate":
            both = [*self.tuning, *self.held_out]
            return {**common, "rules": self._sha("rules"), "questions": [e.id for e in both],
                    "records": self.records_digest(both), "n_fit": self.tune_n, "actions": self.space.actions}  # fmt: skip
        if name == "policy":
            return {**common, **tune, "critic": self._sha("critic"), "rules": self.rules_fixed(),
                    "questions": [e.id for e in self.tuning], "records": self.records_digest(self.tuning)}  # fmt: skip
        if name == "heldout":
            return {**common, "policy": self._sha("policy"), "questions": [e.id for e in self.held_out],
                    "records": self.records_digest(self.held_out)}  # fmt: skip
        return {**common, "policy": self._sha("policy"), "heldout": self._sha_of(self.folder / "heldout.json")}

    def _sha(self, step: str) -> str | None:
        return self._sha_of(self.program(step))

    @staticmethod
    def _sha_of(path: Path) -> str | None:
        return file_sha256(path) if path.is_file() else None

    def run_stamped(self, name: str, stamp: Stamp, inputs: dict) -> str:
        note, extra = getattr(self, f"step_{name}")()
        stamp.write(self.inputs(name) if name == "register" else inputs, **extra)
        return note

    def tune(self, name: str, program: Path | None, fixed: dict) -> tuple[str, dict]:
        from experiments.jobs.tune_job import TuneJob, tune_from_runtime

        space = self.space.model_copy(update={"fixed": {**self.space.fixed, **fixed}})
        job = TuneJob(
            objective="em-cost",
            n_trials=self.job.trials,
            cost=CallCost(max_calls=self.job.max_calls, floors=self.floors()),
            recording=self.recording,
            storage=MEMORY,  # each search runs from its start (a killed build's half is not resumed): same program
            study=f"{self.name}-{name}",
            seed=self.job.seed,
            threads=self.job.threads,
            space=space,
            trial_runs=False,  # the trials are in the step's tune report
            plots=False,  # `sharp tune` draws Optuna's plots; the build's picture is the gate's and the held-out check
        )
        out = tune_from_runtime(
            self.rt,
            job,
            n_questions=self.tune_n,
            program_path=program or self.base,
            system_config=self.job.system_config,
            offset=self.job.offset,
        )
        m = out.best_metrics
        note = f"{out.path}: train EM {m.get('em', 0):.3f}, {m.get('lm_calls_per_q', 0):.2f} LM calls a question"
        if self.floors():
            kept = ", ".join(f"{f} {m.get(FORM_EM + f, 0):.3f} (floor {v:.3f})" for f, v in self.floors().items())
            low = CallCost(floors=self.floors()).below_floor(m)
            note += f"; forms {kept}" + (
                f"; below the floor: {', '.join(low)} (no policy kept every form)" if low else ""
            )
        return note, {"run_id": out.run_id}

    def floors(self) -> dict[str, float]:
        """Each question form's EM on the tuning questions under the program ``--form-floors`` names, replayed over
        the build's recording (no LM call): the floor each policy search keeps. Empty without ``--form-floors``."""
        if self.job.form_floors is None:
            return {}
        if self._floors is None:
            self._floors = form_floors(self.rt, Path(self.job.form_floors), self.tuning, self.recording)
            self.say(
                f"form floors from {self.job.form_floors} on the {len(self.tuning)} tuning questions: "
                + ", ".join(f"{form} {em:.3f}" for form, em in self._floors.items())
            )
        return self._floors

    def rules_pins(self) -> dict:
        return NO_LOGPROBS_RULES if self.logprobs is False else {}

    def step_rules(self) -> tuple[str, dict]:
        return self.tune("rules", None, self.rules_pins())

    def rules_fixed(self) -> dict:
        """The rules the rules step chose, pinned for the policy step (None: "off")."""
        path = self.program("rules")
        if not path.is_file():
            return {}
        config = json.loads(path.read_text())["config"]
        return {k: (config[k] if config[k] is not None else "off") for k in RULES}

    def step_gate(self) -> tuple[str, dict]:
        from experiments.jobs.compile_job import CompileJob, compile_from_runtime

        job = CompileJob(system="sharp", target="critic", name=f"{self.name}-critic", seed=self.job.seed,
                         threads=self.job.threads, critic_reads=False, recording=self.recording,
                         actions=self.space.actions)  # fmt: skip
        out = compile_from_runtime(
            self.rt, job, n_train=self.tune_n, n_val=self.held_n, train_offset=self.job.offset,
            program_path=self.program("rules"), system_config=self.job.system_config,
        )  # fmt: skip
        gate = out.critic["report"].get("gate") or {}
        auroc = gate.get("auroc")
        features = ", ".join(out.critic["gate_features"])
        return (
            f"{out.path}: held-out AUROC {auroc:.3f}" if auroc is not None else f"{out.path}: held-out AUROC n/a"
        ) + f" on {gate.get('drafts', 0)} drafts; features {features}", {"run_id": out.run_id}

    def step_policy(self) -> tuple[str, dict]:
        return self.tune("policy", self.program("critic"), self.rules_fixed())

    def step_heldout(self) -> tuple[str, dict]:
        module, _ = self.rt.load_program(self.program("policy"))
        records = recording.read_records(self.recording, self.held_out)
        recording.check_reading(records.values(), module)
        passages = self.rt.passages()
        out = {
            "critic": critic_report(module, records, self.held_out, self.job.seed, passages),
            "policy": policy_report(module, records, self.held_out, self.job.seed, passages),
        }
        path = self.stamp("heldout").output
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, default=str) + "\n")
        self.figures = figures(out)
        tracking.log_metrics(self.figures)
        tracking.log_json(out, "heldout.json")
        f = self.figures
        return (
            f"{f['heldout_questions']} held-out questions: the draft alone {f['heldout_em_draft']} EM, the program "
            f"{f['heldout_em_program']} EM at {f['heldout_lm_calls_per_q']} LM calls a question; gate AUROC "
            f"{f['gate_auroc_heldout']}"
        ), {}

    def _load_figures(self) -> None:
        path = self.stamp("heldout").output
        if not self.figures and path.is_file():
            self.figures = figures(json.loads(path.read_text()))

    def step_register(self) -> tuple[str, dict]:
        from experiments.export import export_run

        built = builds.built_path(self.ws, self.corpus, self.model)
        built.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.program("policy"), built)
        tracking.log_file(built, "program")
        import mlflow

        registered = export_run(mlflow.active_run().info.run_id, self.name, bundle_code=False)
        return f"{built}, registered as {registered.model_uri}", {"model_uri": registered.model_uri}

    # ---- 10. ship --------------------------------------------------------------------------------
    def ship_stamp(self) -> Stamp:
        return Stamp(shipped.COMPILED_DIR / f"{self.name}.json", self.folder / "ship.inputs.json")

    def ship_inputs(self) -> dict:
        built = builds.built_path(self.ws, self.corpus, self.model)
        return {"program": self._sha_of(built), "figures": self.figures, "force": self.job.force,
                "command": self.job.command}  # fmt: skip

    def ship_skip(self) -> str | None:
        if not self.job.ship:
            return "not asked (--no-ship): the built program stays in the workspace"
        if self.ship_stamp().current(self.ship_inputs()):
            self.shipped = self.ship_stamp().output
            return f"up to date ({self.shipped})"
        return None

    def step_ship(self) -> str:
        from experiments.jobs.ship import refuse_if_worse, ship_check, ship_program

        built = builds.built_path(self.ws, self.corpus, self.model)
        current = shipped.COMPILED_DIR / f"{self.name}.json"
        figs: dict[str, Any] = {**self.figures, "train_questions": self.tune_n + self.held_n}
        note = "first of its name"
        if current.is_file():
            forms = {ex.id: question_form(ex.question) for ex in self.held_out}
            check = ship_check(self.rt, built, current, self.held_out, self.recording, groups=forms)
            tracking.log_metrics({"ship.delta_em": check["delta_em"], "ship.new_em": check["new"]["em"],
                                  "ship.shipped_em": check["shipped"]["em"]})  # fmt: skip
            note = (f"held out: new {check['new']['em']:.3f} EM, shipped {check['shipped']['em']:.3f}, difference "
                    f"{check['delta_em']:+.3f} (95% CI {check['ci']})")  # fmt: skip
            losing = [f"{form} {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]" for form, g in check["by group"].items()
                      if (d := g["delta_em"]) and d[0] < 0]  # fmt: skip
            if losing:  # a gain overall may hide a form that loses: said, not refused (its CI decides nothing)
                note += f"; forms that lose: {', '.join(losing)}"
            try:
                refuse_if_worse(check, self.name, self.job.force)
            except Exception:
                tracking.log_params({"ship.decision": "refused"})
                raise
            figs["ship_check"] = check
        self.shipped = ship_program(built, self.name, commands=[self.job.command] if self.job.command else [],
                                    figures=figs)  # fmt: skip
        self.ship_stamp().write(self.ship_inputs())
        tracking.log_params({"ship.decision": "shipped"})
        return f"shipped {self.shipped} ({note}); commit it with program/compiled/MANIFEST.json"


def form_floors(rt: Any, path: Path, examples: Sequence[Any], recorded: Path) -> dict[str, float]:
    """The EM per question form of the program at ``path`` on ``examples``, replayed over the recording at
    ``recorded``: it must read every round it reaches as that recording's rounds were read (no LM call is made;
    a program that reads otherwise is refused, naming what it would need)."""
    from optimize import replay

    if not path.is_file():
        raise ConfigError(f"--form-floors: no program at {path}")
    module, _ = rt.load_program(path)
    records = recording.read_records(recorded, examples)
    try:
        recording.check_reading(records.values(), module, ("draft", *module.config.reachable_repairs()))
        result = replay.score(records, examples, module.config, passages=rt.passages(), intervals=False)
    except (ConfigError, replay.ReplayError) as exc:
        raise ConfigError(
            f"--form-floors {path}: its floors are replayed from the build's recording {recorded}, and this program "
            f"cannot be ({exc}); name a program that reads as the build's does"
        ) from None
    return {key.removeprefix(FORM_EM): em for key, em in form_em(result.rows, records).items()}
