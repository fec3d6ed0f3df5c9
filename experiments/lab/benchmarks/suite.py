"""One benchmark report (`make bench`): SHARP's speeds, each as a ratio to a baseline measured in the same run.

    python -m experiments.lab.benchmarks.suite [--quick] [--model local/qwen2.5-coder-1.5b] [--workspace WS]
        [--out DIR] [--only index_build,systems,...]

Sections, each against its baseline row (experiments/lab/benchmarks/bench_report.py has the report's shape):
  index_build        passages/s building the default index of a seeded corpus sample in a temp folder
                     with every embedding thread, and the embedder alone, against one thread
  retrieval_latency  ms per query on WS/indexes/DATASET (opened read-only): dense, hybrid, hybrid + second
                     hop and the reranker trained at WS/rerankers/DATASET (when there is one), against bm25
  lm_speed           the local model's generation tokens/s against its prompt tokens/s
  prefix_reuse       seconds per call of one predictor with 4 demos reusing the KV cache of the shared
                     prompt prefix (program/lm/local.py), against every prompt evaluated cold
  systems            seconds and tokens per question of vanilla-hop and sharp against vanilla
  replay             seconds per question scoring SHARP's policy from a recording (optimize/replay.py), and
                     making that recording once, against the live run of the systems section
  chroma_server      dense query latency with the vectors in `chroma run` against the embedded store
  lm_server          seconds per chat call through `sharp lm serve` against the in-process model
  eval_threads       questions per minute of vanilla through `sharp lm serve` with 2 and 4 threads against
                     1, and 4 threads on a server with 2 slots (and whether the answers are those of 1 thread)
Writes OUT/bench.json and OUT/bench.md (default WS/reports/bench); nothing else is written to WS. DSPy's
answer cache is off: every LM call is computed. Every server binds 127.0.0.1 and is stopped at the end,
also on error or interrupt. A section that cannot run is reported as skipped or failed with the reason; the exit
status is 1 when one failed. On 2 cores with the 1.5B model the full run takes about 10-15 minutes,
--quick (smaller samples, one question) about 4. Run it alone: the figures are only as quiet as the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from dspy.utils.exceptions import DSPyError

from experiments.lab.benchmarks import prefix_reuse as prefix_bench
from experiments.lab.benchmarks import servers
from experiments.lab.benchmarks.bench_report import FAILED, Section, write
from experiments.lab.benchmarks.retrieval import latency
from experiments.lab.benchmarks.scaling import TimedEmbedder
from experiments.lab.reporting import log_progress
from experiments.settings import portable
from program.errors import SharpError

log = logging.getLogger("benchmarks.suite")


class BenchError(SharpError):
    """The bench cannot measure what was asked (a section's input is missing)."""


@dataclass(frozen=True)
class Sizes:
    mode: str = "full"
    sample: int = 1000  # passages built into the temp index (twice) and into the Chroma server
    queries: int = 100  # queries timed per retrieval mode
    repeats: int = 2  # LM speed runs per measurement (the best is kept)
    gen_tokens: int = 128
    prefix_calls: int = 6
    questions: int = 3  # questions per system
    replay_questions: int = 2  # of those, recorded and replayed
    server_calls: int = 4
    thread_questions: int = 4
    threads: tuple[int, ...] = (1, 2, 4)


FULL = Sizes()
QUICK = Sizes(
    mode="quick",
    sample=200,
    queries=20,
    repeats=1,
    gen_tokens=32,
    prefix_calls=3,
    questions=1,
    replay_questions=1,
    server_calls=2,
)


class LMBackend(Protocol):
    """The local model three ways: a loaded session, DSPy LMs with a prefix-reuse mode, a server."""

    model: str
    load_seconds: float | None

    def session(self) -> Any: ...

    def lm(self, prefix_reuse: str) -> Any: ...

    def serve(self, parallel: int = 1) -> contextlib.AbstractContextManager[str]: ...

    def reset(self) -> None: ...


class LocalBackend:
    """A local model in this process (program/lm/local.py) and as `sharp lm serve` in another."""

    def __init__(self, model: str, *, n_threads: int = 2, n_ctx: int = 8192):
        self.model, self.n_threads, self.n_ctx = model, n_threads, n_ctx
        self.load_seconds: float | None = None

    def session(self) -> Any:
        from program.lm.local import get_session

        t0 = time.perf_counter()
        session = get_session(self.model, n_ctx=self.n_ctx, n_threads=self.n_threads)
        if self.load_seconds is None:
            self.load_seconds = round(time.perf_counter() - t0, 2)
        return session

    def lm(self, prefix_reuse: str) -> Any:
        return prefix_bench.local_lm(self.model, prefix_reuse, n_ctx=self.n_ctx, n_threads=self.n_threads)

    def serve(self, parallel: int = 1) -> contextlib.AbstractContextManager[str]:
        """`sharp lm serve`; with ``parallel`` slots the CPU threads are shared out among them."""
        threads = max(1, self.n_threads // parallel)
        return servers.lm_server(self.model, n_threads=threads, n_ctx=self.n_ctx, parallel=parallel)

    def reset(self) -> None:
        """Forget the in-process model's cached prompt prefixes (when the systems run on it)."""
        self.session().clear_states()


class MemoEmbedder:
    """An embedder that keeps every vector it made, so a second build of the same passages (into the
    Chroma server) costs no embedding."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.dimension, self.backend = inner.dimension, getattr(inner, "backend", "custom")
        self.method = getattr(inner, "method", None)
        self.max_seq_length = getattr(inner, "max_seq_length", None)
        self.vectors: dict[str, np.ndarray] = {}

    def encode(self, texts, batch_size=None, progress=None) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            self.vectors.update(zip(missing, self.inner.encode(missing, batch_size, progress)))
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)


@dataclass
class Bench:
    """What the sections measure with, and what they hand each other."""

    backend: LMBackend
    lm_config: Any  # program.lm.LMConfig of the systems section
    sizes: Sizes = FULL
    dataset: str = "hotpotqa"
    data_dir: Path | None = None
    workspace: Path | None = None
    # (RetrieverConfig, threads) -> embedder for the builds; None: program.retrieval.embedder.Embedder
    new_embedder: Callable[[Any, int], Any] | None = None
    query_embedder: Any = None  # for opened retrievers; None: the index's own model
    tmp: Path | None = None
    # handed from section to section
    sample: list = field(default_factory=list)
    memo: MemoEmbedder | None = None
    sample_index: Path | None = None
    sharp: Any = None
    sharp_rows: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from experiments import settings
        from experiments.runtime import Runtime

        self.workspace = settings.workspace(self.workspace)
        self.rt = Runtime(self.dataset, self.data_dir, self.workspace, lm_config=self.lm_config, cache=False)
        n = max(self.sizes.queries, self.sizes.questions, self.sizes.thread_questions)
        self.dev = self.rt.examples("dev", n, 0)
        if not self.dev:
            raise BenchError(f"the dev split of {self.dataset} has no question")

    # ---- shared helpers ------------------------------------------------------------------------
    def check_index(self) -> None:
        if self.rt.index_manifest().get("status") != "complete":
            raise BenchError(
                f"no complete index at {self.rt.index_dir()}: build it first with `sharp index --dataset "
                f"{self.dataset} --workspace {self.workspace}` (or `make index`)"
            )

    def embedder(self, config: Any, threads: int) -> Any:
        if self.new_embedder is not None:
            return self.new_embedder(config, threads)
        from program.retrieval.embedder import Embedder

        c = config
        return Embedder(
            c.embedding_model, c.backend, c.max_seq_length, c.embed_batch_size, c.onnx_cache_dir, threads=threads
        )

    def open_retriever(self, overrides: dict | None = None, index_dir: Path | None = None) -> Any:
        """The bench index's retriever with ``overrides``, settled by the runtime as every command settles them
        (a system's default ranker where none fits the corpus: plain hybrid search, with a warning); another
        ``index_dir`` (a freshly built one) takes the overrides as they are."""
        from experiments import rankers, settings
        from program.retrieval import RetrieverConfig, open_retriever

        if index_dir is None:
            config = self.rt.retriever_settings(overrides)
        else:
            config = RetrieverConfig.from_mapping(rankers.resolve(dict(overrides or {}), self.workspace))
        return open_retriever(
            index_dir or self.rt.index_dir(),
            config,
            embedder=self.query_embedder,
            dataset=self.rt.source.ref() if index_dir is None else None,
            rerankers_dir=settings.rerankers_dir(self.workspace),
        )

    def system(self, name: str, rt: Any = None) -> Any:
        from program.serving.registry import config_for
        from program.systems.modes import retriever_overrides

        rt = rt or self.rt
        return rt.system(name, retriever=self.open_retriever(retriever_overrides(config_for(name))))

    def queries(self) -> list[str]:
        return [q.question for q in self.dev[: self.sizes.queries]]


# ---- sections ------------------------------------------------------------------------------------
def index_build(b: Bench, s: Section) -> None:
    from data.indexing import build_index
    from experiments.runtime import load_dataset_corpus
    from program.retrieval import RetrieverConfig
    from program.retrieval.embedder import embed_threads

    corpus = load_dataset_corpus(b.dataset, b.data_dir)
    rng = np.random.default_rng(0)
    sample = [corpus[i] for i in sorted(rng.choice(len(corpus), min(b.sizes.sample, len(corpus)), replace=False))]
    cfg, most = RetrieverConfig(), embed_threads()
    s.baseline = "build, 1 embedding thread"
    for threads in sorted({1, most}):
        timed = TimedEmbedder(b.embedder(cfg, threads))
        timed.inner.encode(["load the model and warm up"])
        emb = MemoEmbedder(timed) if threads == most else timed
        folder = b.tmp / f"index-{threads}-threads"
        t0 = time.perf_counter()
        build_index(sample, folder, cfg, progress=False, embedder=emb)
        secs = time.perf_counter() - t0
        name = "build, 1 embedding thread" if threads == 1 else f"build, {threads} embedding threads"
        s.add(name, passages_per_second=round(len(sample) / secs, 2), seconds=round(secs, 3))
    s.add(f"embedding alone, {most} thread(s)", passages_per_second=round(len(sample) / timed.seconds, 2))
    s.notes.append(
        f"{len(sample)} passages (seeded sample of {len(corpus)}), default index settings ({cfg.backend}, "
        f"{cfg.max_seq_length} tokens), built with data.indexing.build_index as `sharp index` does; "
        "'embedding alone' is the embedder's share of the last build"
    )
    if most == 1:
        s.notes.append("one embedding thread here (SHARP_EMBED_THREADS or one core): no thread comparison")
    b.sample, b.memo, b.sample_index = sample, emb, folder


def retrieval_latency(b: Bench, s: Section) -> None:
    from experiments import settings

    name = b.rt.source.name
    modes = {"bm25": {"mode": "bm25"}, "dense": {"mode": "dense"}, "hybrid": {"mode": "hybrid"}}
    modes["hybrid + second hop"] = {"mode": "hybrid", "second_hop": True}
    reranker = settings.rerankers_dir(b.workspace) / name
    if reranker.is_dir():
        modes["hybrid + reranker"] = {"mode": "hybrid", "reranker": name}
    else:
        s.notes.append(f"no reranker at {reranker} (`sharp train-reranker` makes one): no reranker row")
    from experiments import rankers

    ranker = rankers.rankers_dir(b.workspace) / f"{name}.json"
    if ranker.is_file():
        modes["hybrid + evidence ranker"] = {"mode": "hybrid", "ranker": str(ranker)}
    else:
        s.notes.append(f"no evidence ranker at {ranker} (`sharp fit-ranker` makes one): no ranker row")
    queries = b.queries()
    for label, overrides in modes.items():
        lat = latency(b.open_retriever(overrides), queries, k=10)
        s.add(label, p50_ms=lat["p50_ms"], p95_ms=lat["p95_ms"], queries=lat["n"])
    s.notes.append(f"k=10, one dev question at a time, query embedding included; index {b.rt.index_dir()}")


def lm_speed(b: Bench, s: Section) -> None:
    from experiments.jobs.lm_timing import measure_session

    row = measure_session(b.backend.session(), repeats=b.sizes.repeats, gen_tokens=b.sizes.gen_tokens)
    s.add("prompt", tokens_per_second=row["prompt_tok_s"], tokens=row["prompt_tokens"], seconds=row["prompt_seconds"])
    s.add("generation", tokens_per_second=row["gen_tok_s"], tokens=row["gen_tokens"], seconds=row["gen_seconds"])
    s.notes.append(
        f"{b.backend.model}, loaded in {b.backend.load_seconds} s; prompt evaluated from scratch, best of "
        f"{b.sizes.repeats} (experiments/jobs/lm_timing.py)"
    )


def prefix_reuse(b: Bench, s: Section) -> None:
    calls = prefix_bench.single_calls(b.sizes.prefix_calls)
    runs = {mode: prefix_bench.run_calls(b.backend.lm(mode), mode, calls) for mode in ("off", "states")}
    for label, r in (("cold (every prompt evaluated)", runs["off"]), ("prefix reused", runs["states"])):
        s.add(
            label,
            seconds_per_call=round(r["wall_s"] / r["calls"], 6),
            evaluated_tokens_per_call=round(r["evaluated_tokens"] / r["calls"], 1),
            prompt_tokens_per_call=round(r["prompt_tokens"] / r["calls"], 1),
        )
    c = prefix_bench.compare(runs["off"], runs["states"])
    s.notes.append(
        f"one dspy.Predict with 4 demos over {len(calls)} inputs (experiments/lab/benchmarks/prefix_reuse.py); "
        f"a call's seconds include its few answer tokens; same outputs: {c['same_outputs']}"
    )


def systems(b: Bench, s: Section) -> None:
    from optimize.evaluate import evaluate

    examples = b.dev[: b.sizes.questions]
    for name in ("vanilla", "vanilla-hop", "sharp"):
        module = b.system(name)
        b.backend.reset()  # no system starts with another's prompts cached
        res = evaluate(module, examples, threads=1, progress=False, max_failed_in_a_row=None)
        m = res.metrics
        s.add(
            name,
            seconds_per_q=round(m["seconds_per_q"], 4),
            tokens_per_q=round(m["prompt_tokens_per_q"] + m["completion_tokens_per_q"], 1),
            lm_calls_per_q=round(m["lm_calls_per_q"], 2),
            em=round(m["em"], 3),
            errors=m["errors"],
        )
        if name == "sharp":
            b.sharp, b.sharp_rows = module, {r["id"]: r for r in res.rows}
    s.notes.append(f"{len(examples)} seeded dev question(s), one thread, LM {b.lm_config.summary()['default']}")


def replay(b: Bench, s: Section) -> None:
    from optimize.recording import record
    from optimize.replay import score

    if b.sharp is None:
        raise BenchError("needs the live SHARP run of the systems section")
    examples = [e for e in b.dev[: b.sizes.replay_questions] if e.id in b.sharp_rows]
    cfg = b.sharp.config
    b.backend.reset()  # the recording starts as cold as the live run did
    t0 = time.perf_counter()
    records = record(b.sharp, examples, max_failed_in_a_row=None)
    record_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = score(records, examples, cfg)
    replay_s = time.perf_counter() - t0
    n = len(examples)
    live = [b.sharp_rows[e.id] for e in examples]
    s.add("live run", seconds_per_q=round(sum(r["seconds"] for r in live) / n, 4))
    s.add("replay (scored from the recording)", seconds_per_q=round(replay_s / n, 6))
    s.add("recording (explore mode, made once)", seconds_per_q=round(record_s / n, 4))
    same = sum(a["answer"] == r["answer"] for a, r in zip(result.rows, live))
    s.notes.append(
        f"{n} question(s), SHARP's default policy (accept threshold {cfg.accept_threshold}, at most "
        f"{cfg.max_repairs} repairs); the replay gives the live answer on {same}/{n}; the steps it used took "
        f"{result.metrics['live_seconds_per_q']:.2f} s per question when recorded; one recording scores "
        "every policy (thresholds, critic band, repairs, budgets: `sharp tune`)"
    )


def chroma_server(b: Bench, s: Section) -> None:
    from data.indexing import build_index
    from program.retrieval import RetrieverConfig

    if b.memo is None:
        raise BenchError("needs the passages and vectors of the index_build section")
    try:
        servers.chroma_command()
    except servers.ServerStartError as exc:
        s.skip(str(exc))
        return
    queries = b.queries()
    with servers.chroma_server(b.tmp / "chroma-server") as url:
        t0 = time.perf_counter()
        remote = b.tmp / "index-on-server"
        build_index(b.sample, remote, RetrieverConfig(chroma_url=url), progress=False, embedder=b.memo)
        upload_s = time.perf_counter() - t0
        hits = {}
        for label, folder, overrides in (
            ("embedded", b.sample_index, {"mode": "dense"}),
            ("server (chroma run)", remote, {"mode": "dense", "chroma_url": url}),
        ):
            r = b.open_retriever(overrides, index_dir=folder)
            lat = latency(r, queries, k=10)
            s.add(label, p50_ms=lat["p50_ms"], p95_ms=lat["p95_ms"], queries=lat["n"])
            hits[label] = [[p.id for p in r.retrieve(q, 10)] for q in queries]
    same = sum(a == c for a, c in zip(*hits.values()))
    s.notes.append(
        f"dense top-10 over the {len(b.sample)}-passage sample index, query embedding included; the server's "
        f"collection was filled in {upload_s:.1f} s (vectors reused); same hits: {same}/{len(queries)}"
    )


def _post_chat(base: str, messages: list[dict], max_tokens: int) -> str:
    body = json.dumps({"model": "local", "messages": messages, "max_tokens": max_tokens, "temperature": 0.0})
    req = urllib.request.Request(
        f"{base}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


def lm_server(b: Bench, s: Section) -> None:
    from experiments.jobs.lm_timing import prompt_messages

    session = b.backend.session()
    session.clear_states()
    prompts = [prompt_messages(6 + 3 * i) for i in range(b.sizes.server_calls)]
    sides = {
        "in-process": lambda m, base: session.chat(m, max_tokens=16, temperature=0.0).text,
        "`sharp lm serve`": lambda m, base: _post_chat(base, m, 16),
    }
    outputs: dict[str, list[str]] = {k: [] for k in sides}
    seconds = dict.fromkeys(sides, 0.0)
    t0 = time.perf_counter()
    with b.backend.serve() as base:  # a new process: no cached prefix, like the in-process session now
        start_s = time.perf_counter() - t0
        for m in prompts:  # the two sides alternate, so a change in the machine's load hits both
            for label, call in sides.items():
                t = time.perf_counter()
                outputs[label].append(call(m, base))
                seconds[label] += time.perf_counter() - t
    for label in sides:
        s.add(label, seconds_per_call=round(seconds[label] / len(prompts), 6))
    same = sum(a == c for a, c in zip(*outputs.values()))
    s.notes.append(
        f"{len(prompts)} chat calls of 100-300 prompt tokens and 16 answer tokens, temperature 0, alternating "
        f"between the two; identical outputs: {same}/{len(prompts)}; the server started (model loaded) in "
        f"{start_s:.1f} s"
    )


def eval_threads(b: Bench, s: Section) -> None:
    from experiments.runtime import Runtime
    from optimize.evaluate import evaluate
    from program.lm import SERVED_MODEL, LMConfig

    examples = b.dev[: b.sizes.thread_questions]
    first: dict[str, str] | None = None
    s.baseline = f"{b.sizes.threads[0]} thread(s)"
    slots = 2
    runs = [(threads, 1) for threads in b.sizes.threads] + [(max(b.sizes.threads), slots)]
    for threads, parallel in runs:
        # a fresh server per run: none starts with the prompts of the run before cached
        with b.backend.serve(parallel) as base:
            lms = LMConfig().with_overrides(lm=SERVED_MODEL, api_base=base)
            module = b.system("vanilla", Runtime(b.dataset, b.data_dir, b.workspace, lm_config=lms, cache=False))
            t0 = time.perf_counter()
            res = evaluate(module, examples, threads=threads, progress=False, max_failed_in_a_row=None)
            wall = time.perf_counter() - t0
        answers = {r["id"]: r["answer"] for r in res.rows}
        first = answers if first is None else first
        same = sum(answers.get(i) == a for i, a in first.items())
        s.add(
            f"{threads} thread(s)" + (f", {parallel} server slots" if parallel > 1 else ""),
            questions_per_minute=round(len(examples) * 60 / wall, 3),
            seconds=round(wall, 3),
            same_answers_as_first=f"{same}/{len(first)}",
            errors=res.metrics["errors"],
        )
    s.notes.append(
        f"vanilla on {len(examples)} dev question(s) through `sharp lm serve`, a new server for each run; one slot "
        f"(one loaded model: calls queue) unless the row says slots (`--parallel {slots}`, the CPU threads shared out)"
    )


# key -> (title, {figure: unit}, compared figures, baseline row, measure)
SECTIONS: dict[str, tuple[str, dict[str, str], tuple[str, ...], str, Callable[[Bench, Section], None]]] = {
    "index_build": (
        "Index build throughput",
        {"passages_per_second": "passages/s", "seconds": "s"},
        ("passages_per_second",),
        "build, 1 embedding thread",
        index_build,
    ),
    "retrieval_latency": (
        "Query latency per retrieval mode",
        {"p50_ms": "ms", "p95_ms": "ms", "queries": ""},
        ("p50_ms", "p95_ms"),
        "bm25",
        retrieval_latency,
    ),
    "lm_speed": (
        "Local model tokens per second",
        {"tokens_per_second": "tok/s", "tokens": "", "seconds": "s"},
        ("tokens_per_second",),
        "prompt",
        lm_speed,
    ),
    "prefix_reuse": (
        "Prompt-prefix reuse",
        {"seconds_per_call": "s", "evaluated_tokens_per_call": "tokens", "prompt_tokens_per_call": "tokens"},
        ("seconds_per_call", "evaluated_tokens_per_call"),
        "cold (every prompt evaluated)",
        prefix_reuse,
    ),
    "systems": (
        "Seconds and tokens per question, per system",
        {"seconds_per_q": "s", "tokens_per_q": "tokens", "lm_calls_per_q": "", "em": "", "errors": ""},
        ("seconds_per_q", "tokens_per_q"),
        "vanilla",
        systems,
    ),
    "replay": (
        "Replay against a live run (SHARP)",
        {"seconds_per_q": "s"},
        ("seconds_per_q",),
        "live run",
        replay,
    ),
    "chroma_server": (
        "Chroma server against the embedded store",
        {"p50_ms": "ms", "p95_ms": "ms", "queries": ""},
        ("p50_ms", "p95_ms"),
        "embedded",
        chroma_server,
    ),
    "lm_server": (
        "`sharp lm serve` against the in-process model",
        {"seconds_per_call": "s"},
        ("seconds_per_call",),
        "in-process",
        lm_server,
    ),
    "eval_threads": (
        "Evaluation threads against the local server",
        {"questions_per_minute": "q/min", "seconds": "s", "same_answers_as_first": "", "errors": ""},
        ("questions_per_minute",),
        "1 thread(s)",
        eval_threads,
    ),
}


# the sections that query WORKSPACE/indexes/DATASET
NEED_INDEX = {"retrieval_latency", "systems", "replay", "eval_threads"}


def run(bench: Bench, only: list[str] | None = None, command: str = "") -> dict:
    """Every section (or ``only`` those), in order; the report as a dict, its paths written relative to the
    checkout (or as WORKSPACE/...: experiments.settings.portable), so a committed report names no machine's
    folders."""
    unknown = [k for k in only or [] if k not in SECTIONS]
    if unknown:
        raise BenchError(f"unknown section(s) {unknown}; valid: {', '.join(SECTIONS)}")
    if set(only or SECTIONS) & NEED_INDEX:  # fail before minutes of other sections
        bench.check_index()
    started = time.perf_counter()
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sharp-bench-") as tmp:
        bench.tmp = Path(tmp)
        for key, (title, figures, compared, baseline, measure) in SECTIONS.items():
            if only and key not in only:
                continue
            s = Section(key, title, figures, compared, baseline)
            t0 = time.perf_counter()
            log.info("bench: %s", title)
            try:
                measure(bench, s)
            except BenchError as exc:
                s.skip(str(exc))
            except (SharpError, DSPyError, OSError, RuntimeError, ValueError) as exc:
                log.exception("bench section %s failed", key)
                s.fail(f"{type(exc).__name__}: {exc}")
            s.seconds = round(time.perf_counter() - t0, 1)
            out[key] = s.to_dict()
            log.info("bench: %s %s in %.0f s", key, s.status, s.seconds)
    report = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": command,
        "quick": bench.sizes.mode == "quick",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "model": bench.backend.model,
            "lm": bench.lm_config.summary(),
            "dataset": bench.dataset,
            "workspace": str(bench.workspace),
            "sizes": asdict(bench.sizes),
        },
        "seconds": round(time.perf_counter() - started, 1),
        "sections": out,
    }
    # paths (the workspace, --out, notes naming an index) relative to the checkout, or WORKSPACE/...
    return portable(report, bench.workspace)


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (a scheduler, `kill`) unwinds like Ctrl-C, so every server is stopped."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    from program.lm import DEFAULT_MODEL, LMConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small samples and one question (a few minutes)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="the local model of every LM section")
    ap.add_argument("--n-threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=None, help="holds the index (read only); default ./workspace")
    ap.add_argument("--out", type=Path, default=None, help="report folder (default WORKSPACE/reports/bench)")
    ap.add_argument("--only", default=None, help=f"comma-separated sections: {','.join(SECTIONS)}")
    ap.add_argument("--questions", type=int, default=None, help="questions per system (and at most as many replayed)")
    args = ap.parse_args(argv)
    log_progress()
    only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only else None
    sizes = QUICK if args.quick else FULL
    if args.questions is not None:
        if args.questions < 1:
            ap.error("--questions must be at least 1")
        sizes = replace(sizes, questions=args.questions, replay_questions=min(sizes.replay_questions, args.questions))
    command = "python -m experiments.lab.benchmarks.suite " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        with _sigterm_unwinds():
            bench = Bench(
                backend=LocalBackend(args.model, n_threads=args.n_threads),
                # the systems' LMs share the backend's in-process session (same model, n_ctx, threads)
                lm_config=LMConfig.from_mapping({"default": {"model": args.model, "n_threads": args.n_threads}}),
                sizes=sizes,
                dataset=args.dataset,
                data_dir=args.data_dir,
                workspace=args.workspace,
            )
            report = run(bench, only, command)
    except SharpError as exc:
        log.error("%s", exc)
        return 2
    out = args.out or bench.workspace / "reports" / "bench"
    js, md = write(report, out)
    failed = [k for k, s in report["sections"].items() if s["status"] == FAILED]
    log.info("wrote %s and %s in %.0f s%s", js, md, report["seconds"], f"; failed: {failed}" if failed else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
