"""CLI smoke: `sharp index`, `sharp retrieve --json`, `sharp eval-retrieval --json` on a tiny
HotpotQA-format dataset folder, with the real bundled MiniLM model (torch backend)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from experiments.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def built(tiny_dataset, tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    res = runner.invoke(
        app,
        [
            "index",
            "--dataset",
            str(tiny_dataset),
            "--workspace",
            str(ws),
            "--backend",
            "torch",
            "--no-progress",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return ws


def _json(res) -> dict:
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, res.stdout  # exactly one JSON object on stdout
    return json.loads(lines[0])


def test_index_is_idempotent(built, tiny_dataset):
    manifest = json.loads((built / "indexes" / "tiny" / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["num_passages"] == 20
    assert manifest["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2" and manifest["dimension"] == 384
    res = runner.invoke(
        app,
        [
            "index",
            "--dataset",
            str(tiny_dataset),
            "--workspace",
            str(built),
            "--backend",
            "torch",
            "--no-progress",
            "--json",
        ],
    )
    again = _json(res)
    assert again["completed_at"] == manifest["completed_at"]


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_retrieve_json(built, tiny_dataset, mode):
    args = [
        "retrieve",
        "Which engineer designed the Eiffel Tower?",
        "--dataset",
        str(tiny_dataset),
        "--workspace",
        str(built),
        "--mode",
        mode,
        "-k",
        "3",
        "--backend",
        "torch",
        "--json",
    ]
    out = _json(runner.invoke(app, args))
    assert out["mode"] == mode and len(out["passages"]) == 3
    titles = [p["title"] for p in out["passages"]]
    assert "Eiffel Tower" in titles[:2] and "Gustave Eiffel" in titles


def test_retrieve_table_and_errors(built, tiny_dataset, tmp_path):
    res = runner.invoke(
        app,
        [
            "retrieve",
            "mustard city",
            "--dataset",
            str(tiny_dataset),
            "--workspace",
            str(built),
            "--mode",
            "bm25",
            "-k",
            "2",
        ],
    )
    assert res.exit_code == 0 and "Dijon" in res.stdout
    res = runner.invoke(
        app, ["retrieve", "   ", "--dataset", str(tiny_dataset), "--workspace", str(built), "--mode", "bm25"]
    )
    assert res.exit_code == 2 and "empty query" in res.output
    res = runner.invoke(app, ["retrieve", "x", "--dataset", str(tiny_dataset), "--workspace", str(tmp_path)])
    assert res.exit_code == 2 and f"sharp index --dataset {tiny_dataset} --workspace {tmp_path}" in res.output.replace(
        "\n", ""
    )


def test_eval_retrieval_json(built, tiny_dataset):
    args = [
        "eval-retrieval",
        "--dataset",
        str(tiny_dataset),
        "--split",
        "dev",
        "--workspace",
        str(built),
        "--mode",
        "hybrid",
        "-k",
        "5",
        "--backend",
        "torch",
        "--json",
    ]
    out = _json(runner.invoke(app, args))
    assert out["n"] == 4 and out["mode"] == "hybrid" and out["k"] == 5
    assert out["overall"]["recall@5"] >= 0.75 and set(out["by_type"]) == {"bridge", "comparison"}
    assert {"recall@2", "precision@5", "all_gold@5"} <= set(out["overall"])


def test_help_lists_options():
    for cmd in ("index", "retrieve", "eval-retrieval"):
        res = runner.invoke(app, [cmd, "--help"])
        assert res.exit_code == 0 and "--data-dir" in res.stdout
