"""The console a new user sees: libraries' INFO records go to the log file, not the console, while our
warnings reach both; -v puts everything on the console; a library's own console handler is taken over."""

from __future__ import annotations

import itertools
import json
import logging
import re
import sys

import pytest
from doubles import GarbageLM, KeywordRetriever, ScriptedLM, assign
from typer.testing import CliRunner

from experiments import runtime as rt_mod
from experiments.cli import app
from experiments.console import logs


@pytest.fixture
def clean_logging():
    """Leave the root logger and experiments.console.logs as the test found them."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    logs.reset()
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


def emit_mixed():
    logging.getLogger("onnxruntime.transformers.fusion_attention").info("fused 6 attention nodes")
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1:8008/v1/models")
    logging.getLogger().info("Quantization parameters for tensor onnx::MatMul_123")  # the quantizer: root
    logging.getLogger("mlflow.store.db.utils").warning("a library's warning")
    logging.getLogger("experiments.jobs.evaluation").info("our info")
    logging.getLogger("program.tracing").warning("critic step failed: our warning")
    logging.getLogger("chromadb").error("a library's error")


def test_libraries_info_goes_to_the_file_and_our_warnings_to_the_console(tmp_path, capsys, clean_logging):
    log_file = tmp_path / "sharp.log"
    logs.configure(verbose=False, log_file=log_file)
    emit_mixed()
    console = capsys.readouterr()
    assert console.out == ""  # stdout is for results only
    assert "critic step failed: our warning" in console.err and "a library's error" in console.err
    for quiet in ("fused 6 attention", "HTTP Request", "Quantization parameters", "a library's warning", "our info"):
        assert quiet not in console.err
    text = log_file.read_text()
    for line in ("fused 6 attention", "HTTP Request", "Quantization parameters", "a library's warning", "our info"):
        assert line in text
    assert "WARNING program.tracing" in text and "critic step failed" in text
    assert logs.log_file() == log_file.resolve()


def test_verbose_puts_everything_on_the_console(tmp_path, capsys, clean_logging):
    logs.configure(verbose=True, log_file=tmp_path / "sharp.log")
    emit_mixed()
    err = capsys.readouterr().err
    assert "fused 6 attention" in err and "HTTP Request" in err and "our info" in err
    assert logging.getLogger().level == logging.DEBUG


def test_records_before_the_workspace_is_known_reach_its_log_file(tmp_path, capsys, clean_logging, monkeypatch):
    monkeypatch.delenv("SHARP_LOG_FILE", raising=False)
    logs.configure()
    logging.getLogger("chromadb.config").info("Context impl SQLiteImpl.")
    assert logs.log_file() is None
    from experiments import settings

    ws = settings.workspace(tmp_path / "ws")  # what every command does first
    logging.getLogger("bm25s").info("Building index from tokens")
    path = ws / "logs" / "sharp.log"
    assert logs.log_file() == path
    text = path.read_text()
    assert "Context impl SQLiteImpl." in text and "Building index from tokens" in text
    assert "Context impl" not in capsys.readouterr().err


def test_a_librarys_own_console_handler_is_taken_over(tmp_path, capsys, clean_logging):
    """dspy and mlflow give their loggers a StreamHandler and propagate=False at import; LiteLLM too."""
    lib = logging.getLogger("somelib")
    own = logging.StreamHandler(sys.stderr)
    lib.addHandler(own)
    lib.propagate = False
    try:
        logs.configure(log_file=tmp_path / "sharp.log")
        assert "somelib" in logs.adopt_library_loggers() or own not in lib.handlers
        lib.warning("somelib: noisy")
        assert "somelib: noisy" not in capsys.readouterr().err
        assert "somelib: noisy" in (tmp_path / "sharp.log").read_text()
    finally:
        lib.removeHandler(own)
        lib.propagate = True


def test_an_unwritable_log_file_is_a_warning_not_a_failure(tmp_path, capsys, clean_logging):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    logs.configure(log_file=blocker / "sharp.log")  # a folder that is a file: cannot be created
    logging.getLogger("httpx").info("quiet")
    assert "cannot write the log file" in capsys.readouterr().err and logs.log_file() is None


ROWS = [
    {
        "_id": "a1",
        "question": "What nationality is the director of Pulp Fiction?",
        "answer": "American",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["Pulp Fiction", 0], ["Quentin Tarantino", 0]],
        "context": [
            ["Pulp Fiction", ["Pulp Fiction is a 1994 film directed by Quentin Tarantino."]],
            ["Quentin Tarantino", ["Quentin Tarantino is an American film director."]],
        ],
    },
    {
        "_id": "a2",
        "question": "Which country was Krzysztof Kieslowski from?",
        "answer": "Poland",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["Krzysztof Kieslowski", 0]],
        "context": [["Krzysztof Kieslowski", ["Krzysztof Kieslowski was a Polish film director."]]],
    },
]


@pytest.fixture
def world(tmp_path, monkeypatch, clean_logging):
    """A HotpotQA-format dev file, a keyword retriever and scripted LMs whose critic writes garbage (so
    our code logs a warning per question)."""
    monkeypatch.delenv("SHARP_LOG_FILE", raising=False)
    data = tmp_path / "datasets" / "hotpotqa"
    data.mkdir(parents=True)
    (data / "dev.json").write_text(json.dumps(ROWS))

    def give(module, lm_config):
        planner = ScriptedLM("planner", [])
        planner.answers = itertools.repeat({"sub_questions": ["Who directed the film?", "Where is the director from?"]})
        generator = ScriptedLM("generator", [])
        generator.answers = itertools.repeat({"answer": "American", "supporting_passages": [1]})
        assign(module, {"planner": planner, "critic": GarbageLM("critic"), "generator": generator})

    monkeypatch.setattr(rt_mod, "assign_lms", give)
    monkeypatch.setattr(rt_mod.Runtime, "retriever", lambda self, overrides=None: KeywordRetriever())
    # the critic reads the drafts the gate is unsure of (all of them here: no log-probabilities)
    base = ["--data-dir", str(tmp_path / "datasets"), "--workspace", str(tmp_path / "ws"), "--set", "ask_critic=band",
            "--program", "none"]  # fmt: skip
    return tmp_path, base


def test_eval_console_shows_our_warnings_and_progress_and_the_log_file_has_mlflow_s_set_up(world):
    tmp_path, base = world
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"  # a new store: MLflow and alembic log its creation at INFO
    out = CliRunner().invoke(app, ["eval", "--no-traces", "--tracking-uri", uri, *base])
    assert out.exit_code == 0, out.output
    err = out.stderr
    assert "critic step failed" in err  # ours, a warning: shown
    assert "sharp: 2/2 questions" in err and "EM" in err  # the progress lines (no terminal here)
    assert "Creating initial MLflow database tables" not in out.output and "alembic" not in out.output
    text = (tmp_path / "ws" / "logs" / "sharp.log").read_text()
    assert "Creating initial MLflow database tables" in text
    assert "critic step failed" in text and "sharp eval" in text  # the command line heads its records


def test_ask_shows_each_step_on_stderr_and_json_stays_one_object(world):
    _, base = world
    q = "What nationality is the director of Pulp Fiction?"
    shown = CliRunner().invoke(app, ["ask", q, *base])
    assert shown.exit_code == 0, shown.output
    lines = [ln for ln in shown.stderr.splitlines() if not ln.startswith("WARNING")]
    firsts = [w for w in (re.match(r"[a-z]*", ln).group() for ln in lines) if w in STEP_WORDS]
    # the draft, its discarded critique, the gate's judgement, the retrieval repair, the answer chosen
    assert firsts[:5] == ["retrieve", "answer", "critic", "judge", "retrieve"] and firsts[-1] == "answer"
    assert "k=3" in shown.stderr and "k=5" in shown.stderr
    assert "critic, round 0: -, P(supported) -" in shown.stderr and "discarded: no valid verdict" in shown.stderr
    assert "judge, round 0 (draft): P(right) 0.50, not accepted" in shown.stderr
    assert "trace" in shown.stdout and "answer" in shown.stdout  # the table, as before

    as_json = CliRunner().invoke(app, ["ask", q, "--json", *base])
    assert as_json.exit_code == 0, as_json.output
    pred = json.loads(as_json.stdout)  # the whole of stdout is one JSON object
    assert pred["answer"] == "American" and as_json.stdout.count("\n") == 1
    assert "retrieve, k=" not in as_json.stderr and "opening the index" not in as_json.stderr


STEP_WORDS = {"compare", "retrieve", "critic", "judge", "compose", "answer"}
