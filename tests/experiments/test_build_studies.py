"""The lab studies of issue 39, on small inputs: a recording with its log-probabilities removed (the build of a
model that writes none, measured from the 1.5B's recordings) and the table of what each build chose."""

from __future__ import annotations

import json

from experiments.lab.studies.compiled_choices import choices, markdown
from experiments.lab.studies.gate_hop_features import VARIANTS, WITH_HOPS
from experiments.lab.studies.gate_without_logprobs import strip_logprobs
from optimize import gate_fitting
from program.serving import shipped
from program.sharp.gate import GATE_FEATURES


def test_a_recording_without_log_probabilities_keeps_every_read_but_its_confidences():
    read = {"question": "q", "answer": "a", "confidence": {"mean": -0.1}, "top": [["a", -0.1]], "cited_ids": ["1"]}
    record = {"id": "x", "rounds": [{"action": "draft", "read": read, "reading": "r1"},
                                    {"action": "compare", "read": None, "values": [read, read], "reading": "r2"},
                                    {"action": "chain", "read": read, "hops": [read], "reading": "r3"}]}  # fmt: skip
    bare = strip_logprobs(record)
    reads = [
        bare["rounds"][0]["read"],
        *bare["rounds"][1]["values"],
        bare["rounds"][2]["read"],
        *bare["rounds"][2]["hops"],
    ]
    assert all(r["confidence"] is None and r["top"] is None for r in reads)
    assert all(r["answer"] == "a" and r["cited_ids"] == ["1"] for r in reads)
    assert [r["reading"] for r in bare["rounds"]] == ["r1", "r2", "r3"]  # still replayable by the same program
    assert record["rounds"][0]["read"]["confidence"] == {"mean": -0.1}  # the original untouched


def test_the_hop_feature_study_adds_one_candidate_that_holds_every_hop_feature_the_gate_computes():
    hop_features = {f for f in GATE_FEATURES if f.startswith(("hop_", "chain_")) or f == "action_chain"}
    assert set(gate_fitting.CHAIN) == hop_features and len(hop_features) == 5
    built, with_hops = VARIANTS.values()
    assert built == gate_fitting.CANDIDATE_FEATURES and with_hops[:-1] == built and with_hops[-1] == WITH_HOPS
    assert set(WITH_HOPS) <= set(GATE_FEATURES) and not set(gate_fitting.CHAIN) & set().union(*built[:-1])


def test_the_choices_table_reads_each_program_and_its_manifest_figures():
    path = shipped.COMPILED_DIR / "sharp-2wikimultihopqa.json"
    row = choices(path)
    assert row["model"] == "local/qwen2.5-coder-1.5b" and row["repair_comparison"] == ["compare"]
    assert row["gate_auroc_heldout"] == json.loads((shipped.COMPILED_DIR / "MANIFEST.json").read_text())["programs"][
        "sharp-2wikimultihopqa"]["figures"]["gate_auroc_heldout"]  # fmt: skip
    text = markdown({"1.5B": row, "again": row})
    assert text.splitlines()[0] == "| choice | 1.5B | again |" and "| repair_comparison | compare | compare |" in text
    unshipped = {**row, "gate_auroc_heldout": None, "yes_threshold_sub": None}  # no manifest entry; a choice off
    text = markdown({"unshipped": unshipped})
    assert "| gate_auroc_heldout | n/a |" in text and "| yes_threshold_sub | off |" in text


def test_the_by_form_table_lists_each_form_s_ids_gold_complete_passages_calls_and_the_seconds_ratio():
    from experiments.lab.studies.by_form import table

    forms = {"a": "bridge", "b": "bridge", "c": "comparison"}
    ranked = [{"id": i, "em": 0.0, "all_gold": 0.0, "lm_calls": 1, "seconds": 2.0} for i in "abc"]  # no n_passages
    chain = [
        {"id": "a", "em": 1.0, "all_gold": 1.0, "n_passages": 5, "lm_calls": 3, "seconds": 6.0},
        {"id": "b", "em": 0.0, "all_gold": 0.0, "n_passages": 3, "lm_calls": 3, "seconds": 6.0},
        {"id": "c", "em": 1.0, "all_gold": 1.0, "n_passages": 4, "lm_calls": 2, "seconds": 6.0},
    ]
    out = table({"ranked": ranked, "chain": chain}, forms)
    assert out["ids"] == {"bridge": ["a", "b"], "comparison": ["c"], "yesno": []}
    bridge = out["systems"]["chain"]["bridge"]
    assert (bridge["n"], bridge["em"], bridge["gold_complete"], bridge["lm_calls"]) == (2, 0.5, 0.5, 3.0)
    assert bridge["passages"] == 4.0 and out["systems"]["chain"]["all"]["passages"] == 4.0
    assert out["systems"]["ranked"]["all"]["passages"] is None  # rows written before they kept the count
    assert out["systems"]["chain"]["seconds_ratio"] == 3.0 and "delta_em" in bridge
