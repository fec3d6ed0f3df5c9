"""The dense index in a Chroma server (`chroma run`, reached with --chroma-url): `sharp index`,
`sharp retrieve` and `sharp eval` give the hits of the embedded store; a server that is down or is
not Chroma, or a collection built with another embedder, is a clear error before any expensive work,
and every command such an error suggests is run here to show it works."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import suggested
from fake_openai import QUICK_SHUTDOWN
from typer.testing import CliRunner

from data.indexing import build_index, verify_index
from experiments.cli import app
from program.errors import IndexMismatchError, IndexServerError
from program.retrieval import RetrieverConfig, open_retriever
from program.retrieval.manifest import read_manifest
from program.retrieval.store import DenseStore

CFG = RetrieverConfig(embedding_model="fake-hash", backend="torch")
QUERIES = ["Who designed the Eiffel Tower?", "mustard city", "Who first climbed Mount Everest?", "Python creator"]
CHROMA = Path(sys.executable).parent / "chroma"
runner = CliRunner()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_chroma(args: list[str], log: Path, url: str, wait: float = 60.0) -> subprocess.Popen:
    """`chroma run ARGS`, once it answers its heartbeat at ``url`` (skips the test when it cannot)."""
    if not CHROMA.exists():
        pytest.skip(f"no chroma command next to {sys.executable} (the chromadb package installs it)")
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(CHROMA), *args], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.skip(f"`chroma run` exited with {proc.returncode}: {log.read_text()[-500:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    stop(proc)
    pytest.skip(f"`chroma run` did not answer at {url} within {wait:.0f} s: {log.read_text()[-500:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real Chroma server on a free 127.0.0.1 port, stopped after the module's tests."""
    root = tmp_path_factory.mktemp("chroma-server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_chroma(
        ["run", "--path", str(root / "data"), "--host", "127.0.0.1", "--port", str(port)], root / "log", url
    )
    yield url
    stop(proc)


def hits(retriever) -> list[list[tuple[str, float]]]:
    return [[(p.id, round(p.score, 6)) for p in retriever.retrieve(q, 5)] for q in QUERIES]


def test_server_store_gives_the_hits_of_the_embedded_store(server, tmp_path, passages, fake_embedder):
    embedded, remote = tmp_path / "embedded", tmp_path / "remote"
    build_index(passages, embedded, CFG, progress=False, embedder=fake_embedder)
    manifest = build_index(passages, remote, CFG.replace(chroma_url=server), progress=False, embedder=fake_embedder)
    assert manifest["dense_store"]["kind"] == "chroma-server" and manifest["dense_store"]["url"] == server
    assert not (remote / "chroma").exists() and all(rel.startswith("bm25/") for rel in manifest["files"])
    for mode in ("dense", "hybrid", "bm25"):
        local = open_retriever(embedded, CFG.replace(mode=mode), embedder=fake_embedder)
        served = open_retriever(remote, CFG.replace(mode=mode, chroma_url=server), embedder=fake_embedder)
        assert hits(served) == hits(local), mode
    assert verify_index(remote, CFG.replace(chroma_url=server))["counts"]["dense"] == 20
    # idempotent: the second build checks the server collection and embeds nothing
    fake_embedder.encoded.clear()
    again = build_index(passages, remote, CFG.replace(chroma_url=server), progress=False, embedder=fake_embedder)
    assert fake_embedder.encoded == [] and again["completed_at"] == manifest["completed_at"]


def test_cli_index_retrieve_eval_same_in_both_modes(
    server, tiny_dataset, tmp_path, fake_models, scripted_lms, tracking_uri
):
    out = {}
    for name, extra in (("embedded", []), ("server", ["--chroma-url", server])):
        base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path / name)]
        res = runner.invoke(app, ["index", *base, *extra, "--no-progress", "--json"])
        assert res.exit_code == 0, res.output
        retrieved = []
        for q in QUERIES:
            res = runner.invoke(app, ["retrieve", q, *base, *extra, "--json", "-k", "5"])
            assert res.exit_code == 0, res.output
            retrieved.append([(p["id"], round(p["score"], 6)) for p in json.loads(res.stdout)["passages"]])
        args = ["eval", "--system", "vanilla", *base, *extra, "--json", "--no-traces", "--tracking-uri", tracking_uri]
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        rows = [json.loads(line) for f in (tmp_path / name / "runs").glob("*.jsonl") for line in f.open()]
        out[name] = (retrieved, sorted((r["id"], r["passage_ids"]) for r in rows))
    assert out["server"] == out["embedded"] and len(out["server"][1]) == 4


def test_server_down_is_named_before_any_work(tiny_dataset, tmp_path, fake_models, monkeypatch):
    from data.sources import DatasetSource

    loads = []
    real_corpus = DatasetSource.corpus
    monkeypatch.setattr(DatasetSource, "corpus", lambda self: loads.append(1) or real_corpus(self))
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}"
    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path / "ws"), "--chroma-url", url]
    for args in (
        ["index", *base, "--no-progress"],
        ["retrieve", "Eiffel", *base],
        ["eval", "--system", "vanilla", *base],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and f"no Chroma server answers at {url}" in res.output, res.output
        assert "chroma run --path" in res.output and "Traceback" not in res.output
    assert loads == [] and fake_models == []  # neither the corpus nor a model was loaded
    # the suggested server command works: start it, and the same `sharp index` goes through
    start = suggested(res.output, program="chroma")
    proc = start_chroma(start, tmp_path / "chroma.log", url)
    try:
        res = runner.invoke(app, ["index", *base, "--no-progress"])
        assert res.exit_code == 0, res.output
        assert json.loads(runner.invoke(app, ["retrieve", "mustard city", *base, "--json"]).stdout)["passages"]
    finally:
        stop(proc)
    assert start[start.index("--path") + 1] == str(tmp_path / "ws" / "chroma-server")


def test_a_url_that_is_not_chroma(tmp_path, passages, fake_embedder, fake_models):
    class NotChroma(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), NotChroma)
    threading.Thread(target=httpd.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with pytest.raises(IndexServerError, match=rf"{url} answers but is not a Chroma server.*HTTP 404"):
            build_index(passages, tmp_path / "idx", CFG.replace(chroma_url=url), progress=False, embedder=fake_embedder)
        assert fake_embedder.encoded == [] and not (tmp_path / "idx").exists()
    finally:
        httpd.shutdown()
    res = runner.invoke(app, ["retrieve", "x", "--chroma-url", "ftp://nope"])
    assert res.exit_code == 2 and "chroma_url must look like http://" in res.output


def _retag(store: DenseStore, **meta) -> None:
    """Replace the store's collection by one that says it was built with something else."""
    client = store.client(write=True)
    old = client.get_collection(store.collection, embedding_function=None)
    got = old.get(include=["embeddings", "documents", "metadatas"])
    client.delete_collection(store.collection)
    new = client.create_collection(store.collection, embedding_function=None, metadata={**old.metadata, **meta})
    dim = meta.get("sharp_dimension", len(got["embeddings"][0]))
    new.add(ids=got["ids"], embeddings=[list(e[:dim]) for e in got["embeddings"]], documents=got["documents"])


@pytest.mark.parametrize("where", ["server", "embedded"])
def test_collection_built_with_another_embedder(where, server, tiny_dataset, tmp_path, fake_models):
    extra = ["--chroma-url", server] if where == "server" else []
    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path), *extra]
    assert runner.invoke(app, ["index", *base, "--no-progress"]).exit_code == 0
    index = tmp_path / "indexes" / "tiny"
    store = DenseStore.for_index(index, server if extra else None, read_manifest(index))
    _retag(store, sharp_embedding_model="other-model", sharp_dimension=32)
    res = runner.invoke(app, ["retrieve", "Eiffel", *base, "--mode", "dense"])
    assert res.exit_code == 2 and "was built differently" in res.output
    assert (
        "collection has 'other-model'" in res.output and "dimension: collection has 32, index asks for 64" in res.output
    )
    with pytest.raises(IndexMismatchError, match="built differently"):
        verify_index(index, CFG.replace(chroma_url=server if extra else None))
    repair = suggested(res.output)
    assert repair[0] == "index" and "--rebuild" in repair
    assert runner.invoke(app, [*repair, "--no-progress"]).exit_code == 0
    res = runner.invoke(app, ["retrieve", "Eiffel Tower", *base, "--mode", "dense", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["passages"][0]["title"] == "Eiffel Tower"


def test_the_store_must_match_the_manifest(server, tiny_dataset, tmp_path, fake_models):
    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path)]
    assert runner.invoke(app, ["index", *base, "--no-progress"]).exit_code == 0
    # an embedded index asked through a server: the message says how to move the vectors there
    res = runner.invoke(app, ["retrieve", "Eiffel", *base, "--chroma-url", server])
    assert res.exit_code == 2 and "keeps its vectors in its own chroma/ folder" in res.output
    move = suggested(res.output)
    assert "--chroma-url" in move and "--rebuild" in move
    assert runner.invoke(app, [*move, "--no-progress"]).exit_code == 0
    # now a server index: without --chroma-url the dense part says what to pass; BM25 needs no server
    res = runner.invoke(app, ["retrieve", "Eiffel", *base])
    assert res.exit_code == 2 and f"pass --chroma-url {server}" in res.output
    assert runner.invoke(app, ["retrieve", "mustard city", *base, "--mode", "bm25"]).exit_code == 0
    res = runner.invoke(app, ["retrieve", "Eiffel Tower", *base, "--chroma-url", server, "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["passages"][0]["title"] == "Eiffel Tower"
