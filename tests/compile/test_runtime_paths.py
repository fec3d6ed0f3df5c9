"""The CLI's composition paths (compile_from_runtime, tune_from_runtime) over a stand-in Runtime."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from experiments.jobs.compile_job import CompileJob, compile_from_runtime
from experiments.jobs.tune_job import TuneJob, tune_from_runtime
from optimize.policy_search import SearchSpace
from program.errors import ConfigError
from program.lm import LMConfig
from program.retrieval import RetrieverConfig
from program.serving.saved import read_program


class FakeRuntime:
    """What the commands use of experiments.runtime.Runtime, over the toy world (its questions three times over,
    under other ids, so a critic compile has ten train questions)."""

    def __init__(self, world, workspace: Path):
        self.world, self.workspace, self.dataset = world, workspace, "hotpotqa"
        self.lm_config = LMConfig().with_overrides(lm="openai/toy", critic_lm="openai/toy-critic")
        self.retrievers: list[dict] = []

    def examples(self, split, limit=None, seed=0, balanced=False):
        return [ex.copy(id=f"{ex.id}-{k}") for k in range(3) for ex in self.world.examples()][:limit]

    def retriever_settings(self, overrides=None):
        # SHARP's default ranker ("the dataset's") is resolved by the real Runtime; the toy world has none
        return RetrieverConfig.from_mapping({k: v for k, v in (overrides or {}).items() if k != "ranker"})

    def retriever(self, overrides=None):
        self.retrievers.append(dict(overrides or {}))
        return self.world.retriever()

    def system(self, name, config=None):
        return self.world.program(self.world.small.replace(**(config or {})))

    def index_dir(self):
        return self.workspace / "indexes" / self.dataset

    def index_manifest(self):
        return {"corpus_sha256": "toy"}

    def passages(self):
        from program.sharp.rounds import lookup_in

        return lookup_in({p.id: p for p in self.world.corpus})


def test_compile_from_runtime_samples_disjoint_splits_and_records_the_setup(world, tmp_path, tracked):
    rt = FakeRuntime(world, tmp_path)
    out = compile_from_runtime(
        rt, CompileJob(optimizer="bootstrap", name="rt"), n_train=5, n_val=4, system_config={"max_repairs": 1}
    )
    saved = read_program(out.path)
    assert out.path == tmp_path / "programs" / "rt.json"
    assert saved.config["max_repairs"] == 1 and saved.index_manifest == {"corpus_sha256": "toy"}
    assert saved.meta["dataset"] == "hotpotqa" and saved.meta["index_dir"].endswith("indexes/hotpotqa")
    assert saved.lm["critic"]["model"] == "openai/toy-critic" and saved.retriever["mode"] == "hybrid"
    params = mlflow.get_run(out.run_id).data.params
    assert params["lm.critic"] == "openai/toy-critic" and params["lm.planner"] == "openai/toy"
    assert params["n_train"] == "5" and params["n_val"] == "4" and params["val_split"] == "train"
    with pytest.raises(ConfigError, match="asked for 28 train \\+ 4 validation questions, the split has 30"):
        compile_from_runtime(rt, CompileJob(optimizer="bootstrap"), n_train=28, n_val=4)


def test_a_critic_compile_records_what_its_calibrators_were_fitted_on(world, tmp_path, tracked):
    rt = FakeRuntime(world, tmp_path)
    with pytest.raises(ConfigError, match="at least 10 \\(--n-train\\), got 4"):
        compile_from_runtime(rt, CompileJob(target="critic"), n_train=4, n_val=2)
    out = compile_from_runtime(rt, CompileJob(target="critic", name="rt-critic"), n_train=20, n_val=4, train_offset=2)
    gate = read_program(out.path).config["gate"]["fitted_on"]
    assert {k: gate[k] for k in ("dataset", "corpus_sha256", "ranker", "train_offset", "n_train", "n_heldout")} == {
        "dataset": "hotpotqa",
        "corpus_sha256": "toy",
        "ranker": None,
        "train_offset": 2,
        "n_train": 20,
        "n_heldout": 4,
    }
    assert gate["role"] == "gate" and gate["recording"].endswith(".jsonl")
    recordings = list((tmp_path / "compile" / "rt-critic" / "replay").glob("*.jsonl"))
    assert len(recordings) == 1 and len(recordings[0].read_text().splitlines()) == 24


def test_tune_from_runtime_records_once_and_saves_the_tuned_program(world, tmp_path, tracked):
    rt = FakeRuntime(world, tmp_path)
    space = SearchSpace(ask_critic=("off", "band"), max_repairs=(0, 1))
    out = tune_from_runtime(rt, TuneJob(n_trials=4, space=space), n_questions=6, system_config={"sub_k": 2})
    assert out.study == "sharp-hotpotqa-em-cost" and out.storage == f"sqlite:///{tmp_path / 'optuna.db'}"
    assert out.speedup["recordings"] == 1 and len(list((tmp_path / "replay").glob("*.jsonl"))) == 1
    saved = read_program(out.path)
    assert saved.config["sub_k"] == 2 and saved.config["max_repairs"] == out.best_params["max_repairs"]
    params = mlflow.get_run(out.run_id).data.params
    assert params["lm.critic"] == "openai/toy-critic" and params["dataset"] == "hotpotqa" and params["split"] == "train"


def test_the_runtime_refuses_a_program_whose_calibrators_were_fitted_on_another_dataset(tmp_path, monkeypatch):
    from doubles import KeywordRetriever

    from experiments.runtime import Runtime
    from program.sharp.gate import AnswerCalibrator, CalibratorError
    from program.sharp.module import SharpRAG
    from program.sharp.policy import SharpConfig

    rt = Runtime(dataset="2wikimultihopqa", workspace=tmp_path)
    monkeypatch.setattr(rt, "index_manifest", lambda: {"corpus_sha256": "b" * 64})
    fitted_on = {"dataset": "hotpotqa", "corpus_sha256": "a" * 64}
    gate = AnswerCalibrator.make(("lp_mean",), (0.0,), (1.0,), (1.0,), 0.0, fitted_on)
    judge = AnswerCalibrator.make(("lp_mean", "p_supported"), (0.0, 0.0), (1.0, 1.0), (1.0, 1.0), 0.0, fitted_on)
    for config in (SharpConfig(gate=gate), SharpConfig(judge=judge)):
        with pytest.raises(
            CalibratorError,
            match="fitted on dataset 'hotpotqa' \\(corpus aaaaaaaaaaaa\\), this index holds dataset "
            "'2wikimultihopqa' \\(corpus bbbbbbbbbbbb\\)",
        ):
            rt.check_calibrator(SharpRAG(KeywordRetriever(), config))
    monkeypatch.setattr(rt, "index_manifest", lambda: {"corpus_sha256": "a" * 64})
    rt.check_calibrator(SharpRAG(KeywordRetriever(), SharpConfig(gate=gate, judge=judge)))  # its own corpus


def test_an_optimizer_that_selects_gets_held_out_train_questions_not_the_reported_ones(
    world, tmp_path, tracked, monkeypatch
):
    import experiments.jobs.compile_job as ec

    seen = {}
    real = ec.compile_program

    def spy(student, optimizer, trainset, valset=(), **kw):
        seen["train"], seen["select"] = [e.id for e in trainset], [e.id for e in valset]
        return real(student, optimizer, trainset, valset, **kw)

    monkeypatch.setattr(ec, "compile_program", spy)
    rt = FakeRuntime(world, tmp_path)
    out = compile_from_runtime(
        rt,
        CompileJob(optimizer="bootstrap-rs", name="rs", optimizer_settings={"num_candidate_programs": 1}),
        n_train=4,
        n_val=3,
        n_select=2,
    )
    ids = [e.id for e in rt.examples("train")]
    assert seen["train"] == ids[:4] and seen["select"] == ids[4:6]
    params = mlflow.get_run(out.run_id).data.params
    assert params["n_select"] == "2" and params["select_is_val"] == "False" and params["n_val"] == "3"
    with pytest.raises(ConfigError, match="--n-select must be >= 1"):
        compile_from_runtime(rt, CompileJob(optimizer="bootstrap-rs"), n_train=4, n_val=3, n_select=0)
