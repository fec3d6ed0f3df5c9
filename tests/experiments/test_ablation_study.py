"""The ablation's rows over a recording of some repairs: a row whose policy needs a repair the recording lacks
is left out (never replayed over rounds that are not there), the others kept in order."""

from __future__ import annotations

from experiments.lab.studies.ablation import levers
from program.sharp.policy import SharpConfig


def test_rows_needing_an_unrecorded_repair_are_left_out():
    policy = SharpConfig(
        repair_bridge=("focus",), repair_comparison=("compare",), repair_yesno=("compare",)
    ).model_dump()
    every = [name for name, _ in levers(policy, critic=False)]
    some = [name for name, _ in levers(policy, critic=False, actions=("compare", "focus"))]
    drafts = [name for name, _ in levers(policy, critic=False, actions=())]
    assert any("re-retrieval" in name for name in every)
    assert not any("re-retrieval" in name for name in some)
    assert some == [name for name in every if "re-retrieval" not in name]
    assert drafts == every[:2]  # the draft and the one-call fixes: no repair at all
    assert all(over["ask_critic"] == "off" for _, over in levers(policy, critic=False, actions=()))
