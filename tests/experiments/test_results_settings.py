"""One builder of "the settings that decide the results" (experiments.jobs.evaluation.settings_of), used by
eval and by the arena for its systems and its program entrants: a resumed results file must have been
written with the same settings, whichever command wrote it."""

from __future__ import annotations

from pathlib import Path

import dspy
from doubles import KeywordRetriever

from experiments.jobs.evaluation import results_file, settings_of
from experiments.settings import PROJECT_ROOT, portable
from program.serving.registry import build_system, config_for
from program.serving.saved import save_program


class Runtime:
    """What settings_of reads of experiments.runtime.Runtime."""

    def __init__(self, retriever_config=None, workspace=Path("ws")):
        self.dataset, self.cache, self.workspace = "hotpotqa", True, workspace
        self.retriever_config = retriever_config or {}
        self.lm_config = type("LMs", (), {"summary": lambda self: {"default": "scripted"}})()


EXAMPLES = [dspy.Example(id=f"q{i}", question=f"question {i}?") for i in range(3)]


def saved(path, instructions="Answer in a few words."):
    module = build_system("vanilla", KeywordRetriever(), {"k": 3})
    for _, pred in module.named_predictors():
        pred.signature = pred.signature.with_instructions(instructions)
    return save_program(path, module, "vanilla", retriever={"mode": "dense"})


def test_a_system_is_described_by_its_config_questions_lms_and_retrieval():
    rt = Runtime({"second_hop": True})
    config = config_for("crag", {"k": 2}).model_dump(mode="json")
    s = settings_of(rt, "crag", "dev", EXAMPLES, config=config)
    assert s["system"] == "crag" and s["config"]["k"] == 2 and s["retriever"] == {"second_hop": True}
    assert s["lm"] == {"default": "scripted"} and s["judge"] is None and "program_state_hash" not in s
    assert settings_of(rt, "crag", "dev", EXAMPLES[:2], config=config)["question_ids_hash"] != s["question_ids_hash"]


def test_where_the_vectors_live_starts_no_new_results():
    config = config_for("vanilla", {}).model_dump(mode="json")
    local = settings_of(Runtime({"mode": "hybrid"}), "vanilla", "dev", EXAMPLES, config=config)
    served = settings_of(
        Runtime({"mode": "hybrid", "chroma_url": "http://127.0.0.1:8000"}), "vanilla", "dev", EXAMPLES, config=config
    )
    assert local == served
    assert results_file(Runtime(), local) == results_file(Runtime(), served)


def test_a_built_module_s_prompts_are_part_of_its_settings():
    module = build_system("vanilla", KeywordRetriever(), {"k": 3})
    config = module.config.model_dump(mode="json")
    before = settings_of(Runtime(), "vanilla", "dev", EXAMPLES, config=config, state=module.dump_state())
    for _, pred in module.named_predictors():
        pred.signature = pred.signature.with_instructions("Something else.")
    after = settings_of(Runtime(), "vanilla", "dev", EXAMPLES, config=config, state=module.dump_state())
    assert before["program_state_hash"] != after["program_state_hash"]
    assert results_file(Runtime(), before) != results_file(Runtime(), after)  # eval starts a new file


def test_a_program_is_read_from_its_file_and_a_recompiled_one_differs(tmp_path):
    path = saved(tmp_path / "p.json")
    s = settings_of(Runtime({"second_hop": True}), "mine", "dev", EXAMPLES, program=("mine", path))
    assert (s["system"], s["program"], s["program_file"]) == ("vanilla", "mine", str(path))
    # the runtime's retriever settings go over the program's, as the program runs them
    assert s["config"]["k"] == 3 and s["retriever"] == {
        "second_hop": True,
        "overrides": {"mode": "dense", "second_hop": True},
    }
    saved(path, instructions="Answer with one entity.")  # recompiled in place
    again = settings_of(Runtime({"second_hop": True}), "mine", "dev", EXAMPLES, program=("mine", path))
    assert again["program_state_hash"] != s["program_state_hash"]
    assert {k: v for k, v in again.items() if k != "program_state_hash"} == {
        k: v for k, v in s.items() if k != "program_state_hash"
    }


def test_paths_in_saved_settings_name_no_folder_of_the_machine(tmp_path):
    """The settings are saved next to the results, which are committed: a dataset folder and a program
    file are written relative to the checkout, or as WORKSPACE/... when the workspace lies elsewhere."""
    ws = tmp_path / "ws"
    rt = Runtime(workspace=ws)
    rt.dataset = str(ws / "data" / "held-out")
    s = settings_of(rt, "mine", "dev", EXAMPLES, program=("mine", saved(ws / "programs" / "p.json")))
    assert (s["dataset"], s["program_file"]) == ("WORKSPACE/data/held-out", "WORKSPACE/programs/p.json")
    shipped = PROJECT_ROOT / "program" / "compiled" / "p.json"
    assert portable({"file": shipped, "why": [f"built from {PROJECT_ROOT}"]}) == {
        "file": "program/compiled/p.json",
        "why": ["built from ."],
    }
    assert settings_of(Runtime(), "vanilla", "dev", EXAMPLES)["dataset"] == "hotpotqa"  # a name stays a name


def test_portable_rewrites_only_the_checkout_and_the_workspace(tmp_path):
    root, ws = tmp_path / "main", tmp_path / "ws"
    line = f"run --workspace {ws} --out {ws}/reports/b --data {root}/data; not {root}2/x, {tmp_path}/other"
    assert portable(line, ws, root) == (
        f"run --workspace WORKSPACE --out WORKSPACE/reports/b --data data; not {root}2/x, {tmp_path}/other"
    )
    inside = root / "workspace"  # the default ./workspace: relative to the checkout, not WORKSPACE
    assert portable([f"{inside}/indexes/h", 3, None], inside, root) == ["workspace/indexes/h", 3, None]
