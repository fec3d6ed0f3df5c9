"""The README's documented `sharp` examples, run through the CLI on the toy world (tests/toy_world.py as a
HotpotQA-format dataset), the hashing embedder (`fake_models`) and the rule LM over real HTTP
(tests/live_servers.py RuleServer, by configuration alone: ``--lm openai/rules --api-base URL``), with
small sizes. Tested here, in the README's order (README.md "Commands", and `make run`):

    sharp index --dataset hotpotqa
    sharp index --dataset hotpotqa --verify
    sharp retrieve "Palme d'Or 1994" --mode hybrid -k 5 --json
    sharp eval-retrieval --dataset hotpotqa --split dev --mode hybrid -k 10 --json
    sharp eval-retrieval --dataset hotpotqa --split dev -k 5 --retriever-set second_hop=true
    sharp ask "Which country is the director of Pulp Fiction from?" --json
    sharp eval --system sharp --dataset hotpotqa --split dev --limit 3 --json
    sharp arena --systems vanilla,sharp --dataset hotpotqa --split dev --limit 3
    sharp demo --dataset hotpotqa --limit 3                          (make run)
    sharp compile --system sharp --optimizer bootstrap --dataset hotpotqa --n-train 4 --n-val 3
    sharp compile --system sharp --target critic --n-train 10 --n-val 3 --val-split dev
    sharp tune --system sharp --trials 3 --n 4 --space SPACE --storage journal:PATH --max-calls 1.5
    sharp export RUN_ID --name sharp-hotpotqa ; sharp ask "..." --program models:/sharp-hotpotqa/1

Not run: `sharp arena --systems all` (Self-RAG, CRAG, ... ask for output fields the rule LM does not
write; the arena's own tests cover them with scripted LMs), `sharp lm serve` and `sharp lm bench` (a real
local model; tests/lm covers the server with a fake engine, and `sharp lm info --json`). `--help` of every command:
tests/experiments/test_cli_help.py.
"""

from __future__ import annotations

import json
import re

import dspy
import pytest
from live_servers import RuleServer
from toy_world import CASES, write_dataset
from typer.testing import CliRunner

from experiments.cli import app

runner = CliRunner()
QUESTION = "What nationality is the director of Pulp Fiction?"


@pytest.fixture(scope="module")
def rule_lm():
    server = RuleServer()
    yield server
    server.close()


@pytest.fixture
def sharp(tmp_path, rule_lm, fake_models, tracking_uri):
    """``sharp(*args, lms_=True, track=True, where=True)``: the command on the toy dataset and a fresh
    workspace with its index built (``where``), the rule LM and a DSPy cache of its own (``lms_``; `demo`
    has no cache option) and the session's tracking store (``track``); returns (exit code, output)."""
    data = tmp_path / "data"
    write_dataset(data)
    ws = tmp_path / "ws"
    place = ["--dataset", "hotpotqa", "--data-dir", str(data), "--workspace", str(ws)]
    lms = ["--lm", "openai/rules", "--api-base", rule_lm.base]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    previous = dspy.cache  # --cache-dir points DSPy's cache there for the process: put it back after

    def run(*args: str, lms_: bool = True, track: bool = True, where: bool = True) -> tuple[int, str]:
        extra = [*(place if where else []), *(lms if lms_ else []), *(cache if lms_ and args[0] != "demo" else [])]
        extra += ["--tracking-uri", tracking_uri] if track else []
        res = runner.invoke(app, [*args, *extra])
        assert "Traceback" not in res.output, res.output
        return res.exit_code, res.output

    code, out = run("index", "--no-progress", lms_=False, track=False)
    assert code == 0, out
    run.ws, run.uri = ws, tracking_uri
    yield run
    dspy.cache = previous


def last_json(output: str) -> dict:
    """The last JSON object printed (stderr's progress bars may stand before it on its line)."""
    line = [line for line in output.splitlines() if line.rstrip().endswith("}")][-1]
    return json.loads(line[line.index("{") :])


def test_retrieval_examples(sharp):
    code, out = sharp("index", "--verify", lms_=False, track=False)
    assert code == 0, out
    assert "index verified" in out, out
    code, out = sharp("retrieve", "Palme d'Or 1994", "--mode", "hybrid", "-k", "5", "--json", lms_=False, track=False)
    assert code == 0, out
    hits = last_json(out)
    assert hits["mode"] == "hybrid" and len(hits["passages"]) == 5
    code, out = sharp(
        "eval-retrieval", "--split", "dev", "--mode", "hybrid", "-k", "10", "--json", lms_=False, track=False
    )
    assert code == 0, out
    assert last_json(out)["n"] == len(CASES) and "recall@10" in last_json(out)["overall"]
    args = ["eval-retrieval", "--split", "dev", "-k", "5", "--retriever-set", "second_hop=true", "--json"]
    code, out = sharp(*args, lms_=False, track=False)
    assert code == 0, out
    assert last_json(out)["config"]["second_hop"] is True, out


def test_answering_examples(sharp):
    code, out = sharp("ask", QUESTION, "--json", track=False)
    assert code == 0, out
    assert last_json(out)["answer"] == "American", out
    code, out = sharp("eval", "--system", "sharp", "--split", "dev", "--limit", "3", "--json", "--no-traces")
    assert code == 0, out
    assert last_json(out)["metrics"]["n"] == 3, out
    code, out = sharp("arena", "--systems", "vanilla,sharp", "--split", "dev", "--limit", "3")
    assert code == 0, out
    assert "report:" in out, out
    code, out = sharp("demo", "--limit", "3")
    assert code == 0, out
    assert "SHARP vs plain RAG" in " ".join(out.split()), out


def test_compile_tune_export_and_ask_the_exported_program(sharp, tmp_path):
    base = ["compile", "--system", "sharp", "--optimizer", "bootstrap", "--n-train", "4", "--n-val", "3"]
    code, out = sharp(*base, "--name", "toy")
    assert code == 0, out
    assert "export it with: sharp export" in out, out
    run_id = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("run:"))
    critic = ["compile", "--system", "sharp", "--target", "critic", "--n-train", "10", "--n-val", "3"]
    code, out = sharp(*critic, "--val-split", "dev", "--name", "toy-critic")
    # the rule LM answers every toy draft right: nothing to separate, and the command says so (the fit
    # itself, on a world with right and wrong drafts: tests/compile/test_critic.py)
    assert code == 2, out
    assert re.search(r"cannot fit the answer critic on \d+ drafts: they need right and wrong answers", out), out

    space = tmp_path / "space.yaml"
    space.write_text(
        json.dumps({"threshold_low": 0.2, "threshold_high": 0.9, "max_repairs": [0, 1], "ask_critic": ["off"]})
    )
    storage = f"journal:{tmp_path / 'study.journal'}"
    code, out = sharp(
        "tune", "--system", "sharp", "--trials", "3", "--n", "4", "--space", str(space), "--storage", storage,
        "--max-calls", "1.5",
    )  # fmt: skip
    assert code == 0, out
    assert "trials run now" in out and "em-cost: 0.02 EM a call beyond one, at most 1.5 a question" in out, out

    ws = ["--workspace", str(sharp.ws), "--tracking-uri", sharp.uri]
    code, out = sharp("export", run_id, "--name", "sharp-hotpotqa", *ws, lms_=False, track=False, where=False)
    assert code == 0, out
    assert "registered models:/sharp-hotpotqa/" in out, out
    model = out.split("registered ", 1)[1].split()[0]
    code, out = sharp("ask", QUESTION, "--program", model, "--json")  # --tracking-uri: where the model is
    assert code == 0, out
    assert last_json(out)["answer"] == "American", out
