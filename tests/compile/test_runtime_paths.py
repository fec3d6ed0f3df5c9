"""The CLI's composition paths (compile_from_runtime, tune_from_runtime) over a stand-in Runtime."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from experiments.compile import CompileJob, compile_from_runtime
from experiments.tune import TuneJob, tune_from_runtime
from optimize.tune import SearchSpace
from program.errors import ConfigError
from program.lm import LMConfig
from program.retrieval import RetrieverConfig
from program.saved import read_program


class FakeRuntime:
    """What the commands use of experiments.runtime.Runtime, over the toy world."""

    def __init__(self, world, workspace: Path):
        self.world, self.workspace, self.dataset = world, workspace, "hotpotqa"
        self.lm_config = LMConfig().with_overrides(lm="openai/toy", critic_lm="openai/toy-critic")
        self.retrievers: list[dict] = []

    def examples(self, split, limit=None, seed=0, balanced=False):
        return self.world.examples()[:limit]

    def retriever_settings(self, overrides=None):
        return RetrieverConfig.from_mapping(overrides or {})

    def retriever(self, overrides=None):
        self.retrievers.append(dict(overrides or {}))
        return self.world.retriever()

    def system(self, name, config=None):
        return self.world.program(self.world.small.replace(**(config or {})))

    def index_dir(self):
        return self.workspace / "indexes" / self.dataset

    def index_manifest(self):
        return {"corpus_sha256": "toy"}


def test_compile_from_runtime_samples_disjoint_splits_and_records_the_setup(world, tmp_path, tracked):
    rt = FakeRuntime(world, tmp_path)
    out = compile_from_runtime(
        rt, CompileJob(optimizer="bootstrap", name="rt"), n_train=5, n_val=4, system_config={"max_retries": 2}
    )
    saved = read_program(out.path)
    assert out.path == tmp_path / "programs" / "rt.json"
    assert saved.config["max_retries"] == 2 and saved.index_manifest == {"corpus_sha256": "toy"}
    assert saved.meta["dataset"] == "hotpotqa" and saved.meta["index_dir"].endswith("indexes/hotpotqa")
    assert saved.lm["critic"]["model"] == "openai/toy-critic" and saved.retriever["mode"] == "hybrid"
    params = mlflow.get_run(out.run_id).data.params
    assert params["lm.critic"] == "openai/toy-critic" and params["lm.planner"] == "openai/toy"
    assert params["n_train"] == "5" and params["n_val"] == "4" and params["val_split"] == "train"
    with pytest.raises(ConfigError, match="asked for 8 train \\+ 4 validation questions, the split has 9"):
        compile_from_runtime(rt, CompileJob(optimizer="bootstrap"), n_train=8, n_val=4)


def test_tune_from_runtime_opens_one_retriever_per_mode(world, tmp_path, tracked):
    rt = FakeRuntime(world, tmp_path)
    space = SearchSpace(max_retries=(0, 2), k_start=(1,), k_step=(1,), evidence_cap=(4,), mode=("bm25", "hybrid"))
    out = tune_from_runtime(rt, TuneJob(n_trials=6, space=space), n_questions=6)
    assert out.study == "sharp-hotpotqa-f1" and out.storage == f"sqlite:///{tmp_path / 'optuna.db'}"
    assert rt.retrievers and all(set(r) == {"mode"} for r in rt.retrievers)
    assert len(rt.retrievers) == len({str(r) for r in rt.retrievers})  # each mode opened once
    saved = read_program(out.path)
    assert saved.retriever["mode"] == out.best_params["mode"]
    assert mlflow.get_run(out.run_id).data.params["lm.critic"] == "openai/toy-critic"


def test_an_optimizer_that_selects_gets_held_out_train_questions_not_the_reported_ones(
    world, tmp_path, tracked, monkeypatch
):
    import experiments.compile as ec

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
    ids = [e.id for e in world.examples()]
    assert seen["train"] == ids[:4] and seen["select"] == ids[4:6]
    params = mlflow.get_run(out.run_id).data.params
    assert params["n_select"] == "2" and params["select_is_val"] == "False" and params["n_val"] == "3"
    with pytest.raises(ConfigError, match="--n-select must be >= 1"):
        compile_from_runtime(rt, CompileJob(optimizer="bootstrap-rs"), n_train=4, n_val=3, n_select=0)
