"""The arena: same questions for every system, resume without rerunning, MLflow runs, bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import dspy
import pytest
from doubles import GarbageLM, KeywordRetriever, ScriptedLM

from experiments.jobs.arena import ArenaSpec, check_configs, resolve_systems, run_arena
from program.errors import ConfigError
from program.serving.registry import UnknownSystemError, build_system


def examples(n=6):
    qs = [("What nationality is the director of Pulp Fiction?", "American"), ("Is Paris the capital of France?", "yes")]
    return [
        dspy.Example(
            id=f"q{i}",
            question=qs[i % 2][0] + f" ({i})",
            answer=qs[i % 2][1],
            answer_aliases=[],
            gold_titles=["Pulp Fiction"],
            type="bridge" if i % 2 == 0 else "comparison",
        ).with_inputs("question")
        for i in range(n)
    ]


class LMSummary:
    def summary(self):
        return {"default": "scripted"}


class FakeRuntime:
    """What the arena needs of experiments.runtime.Runtime, with scripted LMs per predictor."""

    def __init__(self, workspace: Path, n=6, interrupt_after=None):
        self.dataset, self.workspace, self.retriever_config, self.cache = "hotpotqa", workspace, {}, True
        self.lm_config, self.n, self.built, self.opened = LMSummary(), n, [], []
        self.interrupt_after = interrupt_after

    def examples(self, split, limit=None, seed=0, balanced=False):
        return examples(self.n)[:limit]

    def retriever(self, overrides=None):
        self.opened.append(overrides)
        return KeywordRetriever()

    def system(self, name, config=None, retriever=None):
        self.built.append(name)
        module = build_system(name, retriever, config)
        for pname, pred in module.named_predictors():
            pred.lm = self._lm(pname)
        if self.interrupt_after is not None:
            module = Interrupting(module, self.interrupt_after)
        return module

    @staticmethod
    def _lm(pname):
        if pname.startswith("generator") or pname.startswith("closed_book"):
            return ScriptedLM("generator", {"question": {"answer": "American", "supporting_passages": [1]}})
        return GarbageLM(pname)


class RecordingRuntime(FakeRuntime):
    """Records the questions its systems are asked."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked = []

    def system(self, name, config=None, retriever=None):
        module = super().system(name, config, retriever)

        def ask(**kw):
            self.asked.append(kw["question"])
            return module(**kw)

        return ask


class Interrupting:
    def __init__(self, module, after):
        self.module, self.after, self.calls = module, after, 0

    def __call__(self, **kw):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return self.module(**kw)


def test_resolve_systems_and_unknown_names():
    assert resolve_systems("sharp, vanilla,sharp") == ("sharp", "vanilla")
    assert "crag" in resolve_systems("all") and "react" in resolve_systems(["all"])
    with pytest.raises(UnknownSystemError, match="valid systems: .*self-rag"):
        resolve_systems("sharp,selfrag")
    with pytest.raises(ConfigError, match="no system"):
        resolve_systems(" , ")
    with pytest.raises(UnknownSystemError, match="config given for unknown system 'crg'"):
        check_configs({"crg": {"upper": 0.5}}, ["crag"])
    with pytest.raises(ConfigError, match="upper"):
        check_configs({"crag": {"upper": 5}}, ["crag"])


def test_arena_runs_every_system_on_the_same_questions_and_resumes(tmp_path):
    rt = FakeRuntime(tmp_path)
    spec = ArenaSpec(systems=("closed-book", "vanilla", "crag"), limit=4, configs={"crag": {"k": 2}})
    res = run_arena(rt, spec, track=False, progress=False)
    assert res.ran == ["vanilla", "closed-book", "crag"]  # the baseline first
    assert rt.opened == [None]  # one retriever shared; closed-book needs none
    for name in res.ran:
        assert [r["id"] for r in res.results[name].rows] == ["q0", "q1", "q2", "q3"]
    assert res.folder == tmp_path / "reports" / "arena-hotpotqa-dev-4-s0"
    assert (res.folder / "summary.md").exists() and (res.folder / "pareto.png").exists()
    assert res.results["crag"].metrics["d_em"] == pytest.approx(0.0) and "d_em_ci" in res.results["crag"].metrics
    meta = json.loads((res.folder / "results" / "crag.meta.json").read_text())
    assert meta["config"]["k"] == 2 and meta["system"] == "crag"

    rt2 = FakeRuntime(tmp_path)
    again = run_arena(rt2, spec, track=False, progress=False)
    assert again.ran == [] and sorted(again.reused) == ["closed-book", "crag", "vanilla"] and rt2.built == []
    assert again.summary["systems"]["crag"]["metrics"]["em"] == res.summary["systems"]["crag"]["metrics"]["em"]


def test_compact_results_survive_a_new_machine_resume_and_rebuild_the_report(tmp_path):
    import shutil

    from optimize.evaluate import COMPACT_FIELDS

    committed = tmp_path / "repo" / "experiments" / "results" / "toy"
    spec = ArenaSpec(systems=("vanilla", "sharp"), limit=4, results_dir=committed)
    first = run_arena(FakeRuntime(tmp_path / "ws1"), spec, track=False, progress=False)
    rows = [json.loads(line) for line in (committed / "sharp.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q0", "q1", "q2", "q3"]
    assert set().union(*rows) <= set(COMPACT_FIELDS) and "trace" not in rows[0] and "passage_ids" not in rows[0]
    assert (committed / "sharp.meta.json").exists()
    # a new machine: another workspace, only the committed compact files
    shutil.rmtree(tmp_path / "ws1")
    rt = FakeRuntime(tmp_path / "ws2")
    rebuilt = run_arena(rt, ArenaSpec(**{**spec.__dict__, "report_only": True}), track=False, progress=False)
    assert rt.built == [] and rebuilt.summary["systems"]["sharp"]["metrics"]["em"] == pytest.approx(
        first.summary["systems"]["sharp"]["metrics"]["em"]
    )
    # a larger sample resumes from them: only the new questions are answered
    from program.digest import digest

    bigger = ArenaSpec(systems=("vanilla", "sharp"), limit=6, results_dir=committed)
    rt = RecordingRuntime(tmp_path / "ws2", n=6)
    grown = run_arena(rt, bigger, track=False, progress=False)
    assert [r["id"] for r in grown.results["sharp"].rows] == [f"q{i}" for i in range(6)]
    assert rt.asked == [e.question for e in examples(6)[4:]] * 2  # vanilla's and sharp's two new questions
    meta = json.loads((committed / "sharp.meta.json").read_text())
    assert meta["question_ids_hash"] == digest([e.id for e in examples(6)], 12)  # the run-only setting updated
    # a report of the smaller sample reads only its own questions' rows
    small = run_arena(
        FakeRuntime(tmp_path / "ws3"), ArenaSpec(**{**spec.__dict__, "report_only": True}), track=False, progress=False
    )
    assert small.summary["systems"]["sharp"]["metrics"]["n"] == 4
    # settings that decide answers are still refused, not mixed
    other = FakeRuntime(tmp_path / "ws4")
    other.cache = False
    with pytest.raises(Exception, match="other settings"):
        run_arena(other, bigger, track=False, progress=False)


def test_evaluate_resumes_from_a_compact_file_without_calling_the_system(tmp_path):
    from optimize.evaluate import evaluate

    calls = []

    def system(question):
        calls.append(question)
        return dspy.Prediction(answer="American", passages=[], trace=[], cost={}, retries=0, stop_reason="x")

    exs = examples(3)
    evaluate(system, exs[:2], tmp_path / "ws" / "run.jsonl", progress=False, compact_path=tmp_path / "c.jsonl")
    assert len(calls) == 2
    res = evaluate(system, exs, tmp_path / "other-ws" / "run.jsonl", progress=False, compact_path=tmp_path / "c.jsonl")
    assert len(calls) == 3 and [r["id"] for r in res.rows] == ["q0", "q1", "q2"]
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == 3


class NoRerankerRuntime(FakeRuntime):
    """A machine without the cross-encoder's weights."""

    def system(self, name, config=None, retriever=None):
        if name == "vanilla-rerank":
            from program.systems.rerank import RerankerUnavailableError

            raise RerankerUnavailableError("reranker 'BAAI/bge-reranker-v2-m3' cannot be loaded")
        return super().system(name, config, retriever)


def test_a_named_system_whose_model_is_missing_fails_before_any_question(tmp_path):
    from program.errors import ModelFileError

    rt = NoRerankerRuntime(tmp_path)
    with pytest.raises(ModelFileError, match="bge-reranker"):
        run_arena(rt, ArenaSpec(systems=("vanilla", "vanilla-rerank"), limit=2), track=False, progress=False)
    assert not (tmp_path / "reports" / "arena-hotpotqa-dev-2-s0" / "results" / "vanilla.jsonl").exists()


def test_all_systems_skip_one_whose_model_is_missing_and_say_why(tmp_path):
    rt = NoRerankerRuntime(tmp_path)
    spec = ArenaSpec(systems=("vanilla", "closed-book", "vanilla-rerank"), limit=2, skip_unavailable=True)
    res = run_arena(rt, spec, track=False, progress=False)
    assert res.ran == ["vanilla", "closed-book"] and list(res.skipped) == ["vanilla-rerank"]
    assert "vanilla-rerank" not in res.summary["systems"] and "bge-reranker" in res.summary["skipped"]["vanilla-rerank"]
    assert "## Not run" in res.report.read_text() and "bge-reranker" in res.report.read_text()


def test_an_interrupted_system_continues_where_it_stopped(tmp_path):
    spec = ArenaSpec(systems=("vanilla",), limit=6)
    with pytest.raises(KeyboardInterrupt):
        run_arena(FakeRuntime(tmp_path, interrupt_after=2), spec, track=False, progress=False)
    path = tmp_path / "reports" / "arena-hotpotqa-dev-6-s0" / "results" / "vanilla.jsonl"
    assert len(path.read_text().splitlines()) == 2
    rt = FakeRuntime(tmp_path, interrupt_after=10)
    res = run_arena(rt, spec, track=False, progress=False)
    assert res.ran == ["vanilla"] and len(res.results["vanilla"].rows) == 6
    # only the 4 missing questions were asked this time
    assert len(path.read_text().splitlines()) == 6


def test_changed_settings_are_refused_with_a_hint(tmp_path):
    run_arena(FakeRuntime(tmp_path), ArenaSpec(systems=("vanilla",), limit=2), track=False, progress=False)
    with pytest.raises(Exception, match="another --name"):
        run_arena(
            FakeRuntime(tmp_path),
            ArenaSpec(systems=("vanilla",), limit=2, configs={"vanilla": {"k": 3}}),
            track=False,
            progress=False,
        )


def test_judge_columns_and_mlflow_parent_with_nested_runs(tmp_path, new_store):
    import mlflow

    from experiments import tracking
    from optimize.llm_judge import Judge

    judge = Judge()
    for _, pred in judge.named_predictors():
        pred.lm = ScriptedLM(
            "judge", {"rating": {"rating": 4}, "claims": {"claims": ["x"]}, "supported": {"supported": True}}
        )
    uri = tracking.configure(new_store(tmp_path / "mlflow.db"), tmp_path, experiment="arena-test")
    spec = ArenaSpec(systems=("vanilla", "closed-book"), limit=2, judge=True)
    res = run_arena(FakeRuntime(tmp_path), spec, track=True, progress=False, judge=judge)
    assert res.folder.name == "arena-hotpotqa-dev-2-s0-judge"
    assert res.results["vanilla"].rows[0]["judge_accuracy"] == 1.0
    assert "judge acc" in res.report.read_text()
    runs = mlflow.search_runs(experiment_names=["arena-test"], output_format="list")
    parent = [r for r in runs if r.data.tags.get("kind") == "arena"]
    nested = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    assert len(parent) == 1 and sorted(r.data.tags["system"] for r in nested) == ["closed-book", "vanilla"]
    cb = next(r for r in nested if r.data.tags["system"] == "closed-book")
    assert "em" in cb.data.metrics and "d_em" in cb.data.metrics and "judge_accuracy" in cb.data.metrics
    artifacts = {a.path for a in mlflow.MlflowClient(uri).list_artifacts(parent[0].info.run_id, "report")}
    assert {"report/summary.md", "report/pareto.png"} <= artifacts


def test_cli_unknown_system_and_a_full_run(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from experiments import options
    from experiments.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["arena", "--systems", "sharp,nope", "--no-tracking"])
    assert bad.exit_code == 2 and "valid systems" in bad.output and "self-rag" in bad.output
    monkeypatch.setattr(options, "runtime", lambda *a, **k: FakeRuntime(tmp_path))
    monkeypatch.setattr(options, "lm_config", lambda *a, **k: LMSummary())
    monkeypatch.setattr(options, "check_lms", lambda *a, **k: None)  # scripted LMs: no server to probe
    ok = runner.invoke(
        app, ["arena", "--systems", "vanilla,crag", "--limit", "2", "--set", "crag.k=2", "--no-tracking", "--json"]
    )
    assert ok.exit_code == 0, ok.output
    out = json.loads(ok.output.strip().splitlines()[-1])
    assert out["ran"] == ["vanilla", "crag"] and Path(out["report"]).exists()
    assert json.loads((Path(out["report"]).parent / "results" / "crag.meta.json").read_text())["config"]["k"] == 2


class CallLog(FakeRuntime):
    """Records (system, question id) across every system, in call order; interrupts after `stop_after` calls."""

    def __init__(self, workspace, n=6, stop_after=None):
        super().__init__(workspace, n)
        self.calls, self.stop_after = [], stop_after

    def system(self, name, config=None, retriever=None):
        module, calls, stop_after = super().system(name, config, retriever), self.calls, self.stop_after

        def run(**kw):
            if stop_after is not None and len(calls) >= stop_after:
                raise KeyboardInterrupt
            calls.append((name, kw["question"].rsplit("(", 1)[1].rstrip(")")))
            return module(**kw)

        return run


def test_step_interleaves_systems_so_a_stopped_arena_has_a_common_prefix(tmp_path):
    spec = ArenaSpec(systems=("vanilla", "closed-book", "crag"), limit=6, step=2)
    rt = CallLog(tmp_path, stop_after=7)
    with pytest.raises(KeyboardInterrupt):
        run_arena(rt, spec, track=False, progress=False)
    assert rt.calls == [
        ("vanilla", "0"),
        ("vanilla", "1"),
        ("closed-book", "0"),
        ("closed-book", "1"),
        ("crag", "0"),
        ("crag", "1"),
        ("vanilla", "2"),
    ]
    staged = (tmp_path / "reports" / "arena-hotpotqa-dev-6-s0" / "summary.md").read_text()
    assert "partial: vanilla 2 of 6, closed-book 2 of 6, crag 2 of 6" in staged  # written after the first stage

    partial = run_arena(
        CallLog(tmp_path), ArenaSpec(systems=spec.systems, limit=6, report_only=True), track=False, progress=False
    )
    assert partial.ran == [] and sorted(partial.reused) == ["closed-book", "crag", "vanilla"]
    ms = {s: e["metrics"]["n"] for s, e in partial.summary["systems"].items()}
    assert ms == {"vanilla": 3, "closed-book": 2, "crag": 2}
    assert partial.summary["systems"]["crag"]["paired"]["em"]["n"] == 2  # paired on the shared questions only
    text = partial.report.read_text()
    assert "partial: vanilla 3 of 6, closed-book 2 of 6, crag 2 of 6" in text and "different numbers" in text

    rt2 = CallLog(tmp_path)  # resumed with the same step: the stage of 4 first, then everything
    done = run_arena(rt2, spec, track=False, progress=False)
    assert rt2.calls[:5] == [("vanilla", "3"), ("closed-book", "2"), ("closed-book", "3"), ("crag", "2"), ("crag", "3")]
    assert len(rt2.calls) == 18 - 7
    assert all(len(r.rows) == 6 for r in done.results.values())


def test_report_only_runs_nothing_and_needs_results(tmp_path):
    from experiments.jobs.arena import ResultsMissingError

    rt = CallLog(tmp_path)
    with pytest.raises(ResultsMissingError, match="run the arena first"):
        run_arena(rt, ArenaSpec(systems=("vanilla",), limit=2, report_only=True), track=False, progress=False)
    assert rt.built == [] and rt.opened == []
    run_arena(rt, ArenaSpec(systems=("vanilla",), limit=2), track=False, progress=False)
    rt2 = CallLog(tmp_path)
    res = run_arena(rt2, ArenaSpec(systems=("vanilla", "crag"), limit=2, report_only=True), track=False, progress=False)
    assert rt2.built == [] and rt2.calls == [] and res.skipped == {"crag": "no question answered yet"}
    assert "(partial:" not in res.report.read_text() and "## Not run" in res.report.read_text()


def test_step_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="step"):
        run_arena(CallLog(tmp_path), ArenaSpec(systems=("vanilla",), limit=2, step=0), track=False, progress=False)


class ProgramRuntime(CallLog):
    """Also loads saved programs (as experiments.runtime.Runtime.load_program does), with scripted LMs."""

    def load_program(self, path, config=None):
        from experiments.runtime import as_run
        from program.serving.saved import load_into, read_program

        saved = as_run(read_program(path), config)
        module = load_into(saved, KeywordRetriever())
        for pname, pred in module.named_predictors():
            pred.lm = self._lm(pname)
        self.built.append(f"program:{Path(path).name}")
        calls = self.calls

        def run(**kw):
            calls.append((Path(path).stem, kw["question"].rsplit("(", 1)[1].rstrip(")")))
            return module(**kw)

        return run, saved


def saved_vanilla(path, k=3, instructions="Answer in a few words."):
    from program.serving.saved import save_program

    module = build_system("vanilla", KeywordRetriever(), {"k": k})
    for _, pred in module.named_predictors():
        pred.signature = pred.signature.with_instructions(instructions)
    return save_program(path, module, "vanilla")


def test_saved_programs_enter_the_arena_beside_systems_and_resume(tmp_path):
    from optimize.evaluate import ResultsMismatchError

    prog = saved_vanilla(tmp_path / "progs" / "vanilla-compiled.json")
    spec = ArenaSpec(systems=("vanilla",), limit=3, programs={"vanilla-compiled": str(prog)}, report="compiled")
    rt = ProgramRuntime(tmp_path)
    res = run_arena(rt, spec, track=False, progress=False)
    assert res.ran == ["vanilla", "vanilla-compiled"] and rt.built == ["vanilla", "program:vanilla-compiled.json"]
    folder = tmp_path / "reports" / "arena-hotpotqa-dev-3-s0"
    assert res.folder == folder / "compiled" and (folder / "compiled" / "summary.md").exists()
    assert not (folder / "summary.md").exists()  # the arena's own report is not overwritten by this view
    assert [r["id"] for r in res.results["vanilla-compiled"].rows] == ["q0", "q1", "q2"]
    assert "d_em_ci" in res.results["vanilla-compiled"].metrics  # paired against the baseline system
    meta = json.loads((folder / "results" / "vanilla-compiled.meta.json").read_text())
    assert meta["system"] == "vanilla" and meta["program"] == "vanilla-compiled" and meta["config"]["k"] == 3
    assert "vanilla-compiled" in res.report.read_text()

    rt2 = ProgramRuntime(tmp_path)  # finished: neither loaded nor rerun
    again = run_arena(rt2, spec, track=False, progress=False)
    assert again.ran == [] and rt2.built == [] and sorted(again.reused) == ["vanilla", "vanilla-compiled"]

    import shutil  # the same program in another checkout's folder resumes the same rows

    (tmp_path / "elsewhere").mkdir()
    moved = shutil.copy(prog, tmp_path / "elsewhere" / prog.name)
    rt3 = ProgramRuntime(tmp_path)
    moved_run = run_arena(rt3, replace(spec, programs={"vanilla-compiled": str(moved)}), track=False, progress=False)
    assert moved_run.ran == [] and rt3.built == []

    saved_vanilla(prog, instructions="Answer with one entity.")  # recompiled in place: other demos/instructions
    with pytest.raises(ResultsMismatchError, match="other settings"):
        run_arena(ProgramRuntime(tmp_path), spec, track=False, progress=False)


def test_program_entrants_and_report_names_are_checked(tmp_path):
    from experiments.jobs.arena import check_programs, report_folder

    prog = saved_vanilla(tmp_path / "p.json")
    with pytest.raises(ConfigError, match="has the name of a system"):
        check_programs({"sharp": str(prog)}, ["vanilla"])
    with pytest.raises(ConfigError, match="no program file at"):
        check_programs({"mine": str(tmp_path / "missing.json")}, ["vanilla"])
    with pytest.raises(ConfigError, match="must be letters"):
        check_programs({"a/b": str(prog)}, ["vanilla"])
    with pytest.raises(ConfigError, match="not 'results'"):
        report_folder(tmp_path, "results")
    with pytest.raises(ConfigError, match="must be letters"):
        report_folder(tmp_path, "../up")
    assert report_folder(tmp_path, None) == tmp_path and report_folder(tmp_path, "v2") == tmp_path / "v2"


def test_cli_program_entrant_names(tmp_path):
    from experiments.commands.arena import program_entrants

    a = saved_vanilla(tmp_path / "a.json")
    b = saved_vanilla(tmp_path / "sub" / "a.json")
    assert program_entrants([str(a), f"other={b}"], tmp_path) == {"a": str(a), "other": str(b)}
    with pytest.raises(ConfigError, match="two program entrants are named 'a'"):
        program_entrants([str(a), str(b)], tmp_path)


def test_runtime_retriever_settings_get_their_own_arena_folder(tmp_path):
    from experiments.jobs.arena import arena_name

    spec = ArenaSpec(systems=("vanilla",), limit=4)
    assert arena_name("hotpotqa", spec) == arena_name("hotpotqa", spec, {}) == "hotpotqa-dev-4-s0"
    hop = arena_name("hotpotqa", spec, {"second_hop": True})
    assert hop.startswith("hotpotqa-dev-4-s0-r") and hop != arena_name("hotpotqa", spec, {"second_hop": False})
    assert arena_name("hotpotqa", ArenaSpec(systems=("vanilla",), name="mine"), {"second_hop": True}) == "mine"
    rt = FakeRuntime(tmp_path)
    rt.retriever_config = {"second_hop": True}
    res = run_arena(rt, spec, track=False, progress=False)
    assert res.folder == tmp_path / "reports" / f"arena-{hop}"
    assert json.loads((res.folder / "results" / "vanilla.meta.json").read_text())["retriever"] == {"second_hop": True}


def test_cli_retriever_set_is_checked_before_any_work(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli import app

    runner = CliRunner()
    for command in (["arena", "--systems", "vanilla", "--no-tracking"], ["eval", "--system", "vanilla"]):
        bad = runner.invoke(app, [*command, "--workspace", str(tmp_path), "--retriever-set", "hop_keep=5"])
        assert bad.exit_code == 2 and "hop_keep" in bad.output, bad.output
        unknown = runner.invoke(app, [*command, "--workspace", str(tmp_path), "--retriever-set", "hops=1"])
        assert unknown.exit_code == 2 and "second_hop" in unknown.output  # the error lists the valid keys
    assert not (tmp_path / "indexes").exists() and not (tmp_path / "reports").exists()


class DownRuntime(FakeRuntime):
    """The generator's server is down: every LM call of that role fails."""

    @staticmethod
    def _lm(pname):
        from doubles import RaisingLM

        from program.errors import LMUnavailableError

        if pname.startswith("generator"):
            return RaisingLM("generator", LMUnavailableError("cannot reach the generator's server"))
        return FakeRuntime._lm(pname)


def test_failed_questions_leave_a_system_unfinished_and_a_rerun_answers_them(tmp_path):
    spec = ArenaSpec(systems=("vanilla",), limit=3)
    down = run_arena(DownRuntime(tmp_path), spec, track=False, progress=False)
    assert down.results["vanilla"].metrics["errors"] == 3
    assert down.summary["systems"]["vanilla"]["metrics"]["errors"] == 3

    rt = FakeRuntime(tmp_path)
    up = run_arena(rt, spec, track=False, progress=False)
    assert up.ran == ["vanilla"] and rt.built == ["vanilla"]  # not "reused": its failed questions are retried
    assert up.results["vanilla"].metrics["errors"] == 0 and up.results["vanilla"].metrics["em"] == pytest.approx(2 / 3)
