"""`make bench` (experiments/lab/benchmarks/suite.py) in its quick mode on the toy world: every section is in the
report, every ratio is the row's figure over the baseline row's of the same run, servers are stopped (also
when a section fails or the run is interrupted). LMs are scripted: a model-free local session
(doubles.TimedSession) in process and behind the real `sharp lm serve` HTTP layer, the toy world's rule LM
over HTTP for the systems. No wall-clock time is asserted; only how ratios relate to the figures."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import urllib.request
from dataclasses import replace

import numpy as np
import pytest
from doubles import TimedSession, field_reply, session_lm
from fake_openai import QUICK_SHUTDOWN
from live_servers import RuleServer
from toy_world import write_dataset

from data.indexing import build_index
from experiments.jobs.lm_timing import measure_session
from experiments.lab.benchmarks import bench_report, servers, suite
from experiments.runtime import dataset_source
from program.errors import ModelFileError
from program.lm import LMConfig
from program.lm.server import make_server
from program.retrieval import RetrieverConfig

SIZES = replace(suite.QUICK, sample=10, queries=4, prefix_calls=2, questions=2, thread_questions=3, gen_tokens=8)


class WordHash:
    """A model-free embedder: hashed words (32-d)."""

    backend, max_seq_length, dimension = "fake", 128, 32

    def encode(self, texts, batch_size=None, progress=None) -> np.ndarray:
        out = np.full((len(texts), self.dimension), 1e-3, dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class FakeBackend:
    """The local model as TimedSession: in process, as DSPy LMs, and behind make_server (the HTTP layer of
    `sharp lm serve`) on 127.0.0.1."""

    model = "local/fake"

    def __init__(self, fail: Exception | None = None):
        self.fake = TimedSession(prompt_tps=2000.0, gen_tps=50.0)
        self.load_seconds = 0.0
        self.fail = fail
        self.bases: list[str] = []
        self.slots: list[int] = []
        self.stopped = 0

    def session(self):
        if self.fail:
            raise self.fail
        return self.fake

    def lm(self, prefix_reuse):
        return session_lm(self.session(), prefix_reuse)

    def reset(self):
        self.fake.clear_states()

    @contextlib.contextmanager
    def serve(self, parallel=1):
        self.reset()  # `sharp lm serve` is a new process: nothing cached
        self.slots.append(parallel)
        server = make_server([self.session()] * parallel, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True)
        thread.start()
        self.bases.append(f"http://127.0.0.1:{server.server_address[1]}/v1")
        try:
            yield self.bases[-1]
        finally:
            server.shutdown()
            server.server_close()
            self.stopped += 1


@pytest.fixture(scope="module")
def toy_bench(tmp_path_factory):
    """DATA/hotpotqa (the toy world), WS/indexes/hotpotqa built with WordHash, the rule LM over HTTP."""
    root = tmp_path_factory.mktemp("bench")
    write_dataset(root / "data")
    source = dataset_source("hotpotqa", root / "data")
    ws = root / "ws"
    build_index(
        source.corpus(), ws / "indexes" / "hotpotqa", RetrieverConfig(), progress=False, embedder=WordHash(),
        dataset=source.ref(),
    )  # fmt: skip
    rules = RuleServer()
    yield root / "data", ws, rules
    rules.close()


def make_bench(toy_bench, backend=None, sizes=SIZES) -> suite.Bench:
    data, ws, rules = toy_bench
    return suite.Bench(
        backend=backend or FakeBackend(),
        lm_config=LMConfig().with_overrides(lm="openai/rules", api_base=rules.base),
        sizes=sizes,
        dataset="hotpotqa",
        data_dir=data,
        workspace=ws,
        new_embedder=lambda config, threads: WordHash(),
        query_embedder=WordHash(),
    )


def down(base: str) -> bool:
    try:
        urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=2)
    except OSError:
        return True
    return False


def check_ratios(section: dict) -> None:
    base = next(r for r in section["rows"] if r["name"] == section["baseline"])
    for row in section["rows"]:
        for fig in section["compared"]:
            value, ref = row.get(fig), base.get(fig)
            if value is None or not ref:
                assert row["ratio"][fig] is None
            else:
                assert row["ratio"][fig] == pytest.approx(value / ref, rel=1e-3, abs=1e-4), (section["title"], fig)
    assert all(base["ratio"][f] in (1.0, None) for f in section["compared"])


@pytest.fixture
def chroma_seen(monkeypatch):
    """The URL of every Chroma server the bench starts."""
    urls = []
    real = servers.chroma_server

    @contextlib.contextmanager
    def spy(folder, wait_s=90.0):
        with real(folder, wait_s) as url:
            urls.append(url)
            yield url

    monkeypatch.setattr(servers, "chroma_server", spy)
    return urls


def test_quick_bench_reports_every_section_against_its_baseline(toy_bench, tmp_path, chroma_seen):
    backend = FakeBackend()
    report = suite.run(make_bench(toy_bench, backend), command="test")
    sections = report["sections"]
    assert list(sections) == list(suite.SECTIONS)
    for key, s in sections.items():
        if key == "chroma_server" and s["status"] == "skipped":
            assert "chroma" in s["reason"]  # no `chroma` command next to this Python
            continue
        assert s["status"] == "ok", (key, s["reason"])
        assert s["baseline"] in [r["name"] for r in s["rows"]] and len(s["rows"]) >= 2, key
        check_ratios(s)

    names = {k: [r["name"] for r in s["rows"]] for k, s in sections.items()}
    assert names["retrieval_latency"] == ["bm25", "dense", "hybrid", "hybrid + second hop"]
    assert any("no reranker" in n for n in sections["retrieval_latency"]["notes"])
    assert names["systems"] == ["vanilla", "vanilla-hop", "sharp"]
    assert names["eval_threads"] == ["1 thread(s)", "2 thread(s)", "4 thread(s)", "4 thread(s), 2 server slots"]
    # the scripted figures come through: TimedSession generates 40x slower than it reads a prompt
    speed = {r["name"]: r for r in sections["lm_speed"]["rows"]}
    assert speed["generation"]["ratio"]["tokens_per_second"] == pytest.approx(50 / 2000, rel=0.1)
    reuse = {r["name"]: r for r in sections["prefix_reuse"]["rows"]}
    assert reuse["prefix reused"]["ratio"]["evaluated_tokens_per_call"] < 1.0  # the shared demos were reused
    assert "same outputs: 2/2" in sections["prefix_reuse"]["notes"][0]
    systems = {r["name"]: r for r in sections["systems"]["rows"]}
    assert systems["sharp"]["ratio"]["tokens_per_q"] > 1.0 and systems["sharp"]["errors"] == 0
    assert all(r["same_answers_as_first"] == "3/3" and r["errors"] == 0 for r in sections["eval_threads"]["rows"])
    assert "identical outputs: 2/2" in sections["lm_server"]["notes"][0]
    assert "the replay gives the live answer on 1/1" in sections["replay"]["notes"][0]
    if sections["chroma_server"]["status"] == "ok":
        assert "same hits: 4/4" in sections["chroma_server"]["notes"][0]

    # every server is down again
    assert backend.stopped == len(backend.bases) == 5 and all(down(b) for b in backend.bases)
    assert backend.slots == [1, 1, 1, 1, 2]  # lm_server's, then eval_threads' three one-slot servers and one of 2
    assert all(down(u) for u in chroma_seen)
    # the report files: JSON as returned, Markdown with every section
    js, md = bench_report.write(report, tmp_path / "out")
    assert json.loads(js.read_text())["sections"].keys() == sections.keys()
    text = md.read_text()
    assert all(f"## {s['title']}" in text for s in sections.values()) and "(baseline)" in text
    # they name no folder of this machine: the workspace (outside the checkout here) is WORKSPACE
    ws = toy_bench[1]
    assert report["settings"]["workspace"] == "WORKSPACE"
    assert any("index WORKSPACE/indexes/hotpotqa" in n for n in sections["retrieval_latency"]["notes"])
    assert str(ws) not in js.read_text() and str(ws) not in text


def test_a_failing_section_is_reported_and_the_rest_still_run(toy_bench):
    backend = FakeBackend(fail=ModelFileError("local/fake: packages missing (pip install x)"))
    report = suite.run(make_bench(toy_bench, backend), only=["systems", "lm_speed", "lm_server", "eval_threads"])
    s = report["sections"]
    assert list(s) == ["lm_speed", "systems", "lm_server", "eval_threads"]
    assert s["lm_speed"]["status"] == "failed" and "packages missing" in s["lm_speed"]["reason"]
    assert s["lm_server"]["status"] == "failed"
    assert s["eval_threads"]["status"] == "failed" and "packages missing" in s["eval_threads"]["reason"]
    assert s["systems"]["status"] == "ok"
    assert "**failed**: ModelFileError" in bench_report.markdown(report)


def test_an_interrupted_bench_stops_its_servers(toy_bench, monkeypatch):
    backend = FakeBackend()

    def interrupted(base, messages, max_tokens):  # Ctrl-C (or SIGTERM) while the server answers
        raise KeyboardInterrupt

    monkeypatch.setattr(suite, "_post_chat", interrupted)
    with pytest.raises(KeyboardInterrupt):
        suite.run(make_bench(toy_bench, backend), only=["lm_server", "eval_threads"])
    assert backend.stopped == 1 and down(backend.bases[0])


def test_unknown_sections_are_refused(toy_bench):
    with pytest.raises(suite.BenchError, match="unknown section"):
        suite.run(make_bench(toy_bench), only=["lm_speed", "warp_drive"])


def test_ratios_are_against_the_baseline_row_of_the_section():
    s = bench_report.Section("x", "X", {"a": "s", "b": ""}, ("a",), baseline="base")
    s.add("base", a=2.0, b=1)
    s.add("other", a=3.0, b=5)
    s.add("missing", b=2)
    rows = {r["name"]: r["ratio"] for r in s.to_dict()["rows"]}
    assert rows == {"base": {"a": 1.0}, "other": {"a": 1.5}, "missing": {"a": None}}
    assert bench_report.Section("y", "Y", {"a": ""}, ("a",), "gone").to_dict()["rows"] == []


def test_memo_embedder_embeds_each_text_once():
    class Counting(WordHash):
        seen: list[str] = []

        def encode(self, texts, batch_size=None, progress=None):
            self.seen += list(texts)
            return super().encode(texts)

    inner = Counting()
    memo = suite.MemoEmbedder(inner)
    first = memo.encode(["a b", "c"])
    again = memo.encode(["c", "a b", "d"])
    assert inner.seen == ["a b", "c", "d"]
    assert np.array_equal(again[1], first[0]) and memo.method is None and memo.dimension == 32


def test_measure_session_reads_the_prompt_and_generation_speeds():
    row = measure_session(TimedSession(prompt_tps=500.0, gen_tps=25.0), repeats=2, gen_tokens=16)
    # the prompt call also makes one answer token, so its speed reads a little under the prompt rate
    assert 0.9 * 500 < row["prompt_tok_s"] <= 500 and row["prompt_tokens"] > 400
    assert row["gen_tok_s"] == pytest.approx(25.0, rel=0.05)
    with pytest.raises(ValueError, match="repeats"):
        measure_session(TimedSession(), repeats=0)


def test_sharp_lm_bench_times_each_model_and_writes_its_rows(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import program.lm.local as local
    from experiments.cli import app

    monkeypatch.setenv("SHARP_WORKSPACE", str(tmp_path))
    monkeypatch.setattr(local, "get_session", lambda model, **kw: TimedSession(prompt_tps=800.0, gen_tps=40.0))
    res = CliRunner().invoke(app, ["lm", "bench", "--model", "local/smollm2-135m", "--repeats", "1"])
    assert res.exit_code == 0, res.output
    assert re.search(r"local/smollm2-135m .* gen +\d", res.stdout)
    rows = json.loads((tmp_path / "benchmarks" / "lm_speed.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["local/smollm2-135m"] and 700 < rows[0]["prompt_tok_s"] <= 800


def test_the_scripted_session_answers_dspy_prompts_in_their_format():
    import dspy

    class QA(dspy.Signature):
        """Answer."""

        question: str = dspy.InputField()
        answer: str = dspy.OutputField()
        hits: list[int] = dspy.OutputField()

    for adapter in (dspy.ChatAdapter(), dspy.JSONAdapter()):
        sig = dspy.Predict(QA).signature
        reply = field_reply(adapter.format(sig, demos=[], inputs={"question": "q"}))
        assert adapter.parse(sig, reply) == {"answer": "Dijon", "hits": []}


def test_a_missing_index_is_refused_before_any_section_runs(toy_bench, tmp_path):
    data, _, rules = toy_bench
    bench = replace(make_bench(toy_bench), workspace=tmp_path / "empty")
    with pytest.raises(suite.BenchError, match="no complete index at .*sharp index --dataset hotpotqa"):
        suite.run(bench, only=["lm_speed", "systems"])
    assert suite.run(bench, only=["lm_speed"])["sections"]["lm_speed"]["status"] == "ok"


def test_the_command_line_refuses_zero_questions(capsys):
    with pytest.raises(SystemExit):
        suite.main(["--quick", "--questions", "0"])
    assert "--questions must be at least 1" in capsys.readouterr().err
