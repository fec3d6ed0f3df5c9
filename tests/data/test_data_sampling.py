"""Seeded sampling: reproducible across processes, nested, balanced across types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from data.examples import make_example
from data.sampling import sample

ROOT = Path(__file__).resolve().parents[2]


def pool(n: int = 40) -> list:
    types = ["bridge", "comparison", None, "bridge"]
    return [
        make_example(id=f"q{i}", question=f"question {i}?", answer="a", dataset="t", type=types[i % 4])
        for i in range(n)
    ]


def ids(examples) -> list[str]:
    return [ex.id for ex in examples]


def test_same_seed_same_sample_and_different_seed_differs():
    examples = pool()
    assert ids(sample(examples, 10, seed=1)) == ids(sample(examples, 10, seed=1))
    assert ids(sample(examples, 10, seed=1)) != ids(sample(examples, 10, seed=2))


def test_sample_ignores_input_order_and_is_nested():
    examples = pool()
    assert ids(sample(examples, 10, seed=4)) == ids(sample(list(reversed(examples)), 10, seed=4))
    assert ids(sample(examples, 10, seed=4)) == ids(sample(examples, 15, seed=4))[:10]


def test_no_limit_keeps_everything_in_order():
    examples = pool(5)
    assert ids(sample(examples)) == ids(examples)
    assert sample(examples, 0) == [] and len(sample(examples, 100)) == 5


def test_balanced_round_robin_over_types_with_none_as_a_group():
    examples = pool()  # 20 bridge, 10 comparison, 10 None
    chosen = sample(examples, 9, seed=0, balanced=True)
    assert Counter(ex.type for ex in chosen) == {"bridge": 3, "comparison": 3, None: 3}
    everything = sample(examples, None, seed=0, balanced=True)
    assert sorted(ids(everything)) == sorted(ids(examples))
    assert Counter(ex.type for ex in sample(examples, 30, balanced=True)) == {"bridge": 10, "comparison": 10, None: 10}
    assert ids(sample(examples, 9, seed=0, balanced=True)) == ids(chosen)


def test_small_group_runs_out_and_others_fill_in():
    examples = pool(8)[:5]  # bridge q0,q3,q4 ; comparison q1 ; None q2
    chosen = sample(examples, 5, balanced=True)
    assert Counter(ex.type for ex in chosen) == {"bridge": 3, "comparison": 1, None: 1}


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_bad_limit(bad):
    with pytest.raises(ValueError, match="limit"):
        sample(pool(3), bad)


def test_same_sample_in_another_python_process():
    code = (
        "import json\n"
        "from data.examples import make_example\nfrom data.sampling import sample\n"
        "types = ['bridge', 'comparison', None, 'bridge']\n"
        "ex = [make_example(id=f'q{i}', question='q?', answer='a', dataset='t', type=types[i % 4])\n"
        "      for i in range(40)]\n"
        "print(json.dumps([[e.id for e in sample(ex, 10, seed=7)], [e.id for e in sample(ex, 10, 7, True)]]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    plain, balanced = json.loads(out.stdout)
    assert plain == ids(sample(pool(), 10, seed=7))
    assert balanced == ids(sample(pool(), 10, seed=7, balanced=True))
