"""README.md "From Python": its code block, run verbatim in a new Python process, over a real index that this
test builds (the toy corpus and the README's passages, tests/load_world.py) in the default workspace
($SHARP_WORKSPACE), with a shipped program fitted on it for the default model, that model answering by rule
(the rule LM over HTTP). The process must not import experiments/, optimize/, data/, MLflow or Optuna: a
served program has none of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from live_servers import RuleServer
from load_world import build_index, ship, use_hash_embedder

from program.lm import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

# what the test puts in place before the README's code: the shipped programs' folder, the embedding model
# and the default model's engine (the rest is the code the README shows)
SETUP = """
import sys
sys.path.insert(0, {tests!r})
import program.lm.factory, program.retrieval.factory, program.serving.shipped
from pathlib import Path
from doubles import HashEmbedderFactory
from load_world import rule_lm_builder
program.serving.shipped.COMPILED_DIR = Path({shipped!r})
program.retrieval.factory.shared_embedder = HashEmbedderFactory.from_config
program.lm.factory.build_lm = rule_lm_builder({base!r})
"""
AFTER = """
ABOVE = {"experiments", "optimize", "data", "mlflow", "optuna"}
print("@@IMPORTED@@" + json.dumps(sorted({m.split(".")[0] for m in sys.modules} & ABOVE)))
"""


def readme_python() -> str:
    """The first ```python block of the README's "From Python" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_snippet_is_short():
    lines = [line for line in readme_python().splitlines() if line.strip()]
    assert 3 <= len(lines) <= 10, lines


@pytest.fixture
def rules():
    server = RuleServer()
    yield server
    server.close()


def test_the_readme_python_example_runs_as_written(tmp_path, monkeypatch, rules):
    use_hash_embedder(monkeypatch)
    ws = tmp_path / "ws"
    ship(tmp_path / "compiled", build_index(ws), lm=DEFAULT_MODEL)
    code = "\n".join(
        [
            SETUP.format(tests=str(TESTS), shipped=str(tmp_path / "compiled"), base=rules.base),
            readme_python(),
            "import json",
            AFTER,
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARP_WORKSPACE": str(ws), "DSPY_CACHEDIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Monticello ['Castle Hill (Virginia)', 'Monticello'"), out.stdout
    # lm_calls: the draft, then the bridge repair (the rule LM gives no log-probabilities, so P(right) is 0.5)
    assert lines[0].split()[-1] == "2" and rules.requests == 4
    assert lines[1].split() == ["retriever"] and lines[-3].split() == ["select", "Monticello"]
    assert lines[-2] == "Love Actually"  # the batch's one answer
    assert json.loads(lines[-1].removeprefix("@@IMPORTED@@")) == []
