"""Every command resolves --dataset the same way (data/sources.py): a benchmark name, a dataset
folder or a question file works for `index`, `retrieve`, `eval-retrieval`, `eval` and `ask`, and each
command an error message suggests is run here and works."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import suggested
from typer.testing import CliRunner

from data.indexing import build_index
from experiments.cli import app
from experiments.runtime import Runtime, dataset_source
from program.retrieval import RetrieverConfig

runner = CliRunner()


def invoke(*args: str):
    res = runner.invoke(app, list(args))
    assert "Traceback" not in res.output, res.output
    return res


def run_suggestion(res, expect_exit: int = 0):
    """Run the `sharp ...` command that a failed command's error message suggests."""
    assert res.exit_code == 2, res.output
    args = suggested(res.output)
    again = invoke(*args, *(["--no-progress"] if args[0] == "index" else []))
    assert again.exit_code == expect_exit, again.output
    return args


def eval_args(dataset: str, ws, uri: str, *extra: str) -> list[str]:
    return ["eval", "--system", "vanilla", "--dataset", dataset, "--workspace", str(ws), "--json", "--no-traces",
            "--tracking-uri", uri, *extra]  # fmt: skip


@pytest.mark.parametrize("form", ["folder", "file"])
def test_eval_takes_a_folder_or_a_file_and_its_suggestion_works(
    form, tiny_dataset, tmp_path, fake_models, scripted_lms, tracking_uri
):
    dataset = str(tiny_dataset) if form == "folder" else str(tiny_dataset / "dev.json")
    ws = tmp_path / "ws"
    res = invoke(*eval_args(dataset, ws, tracking_uri))
    assert "no retrieval index" in res.output
    args = run_suggestion(res)  # `sharp index --dataset <the same absolute path> --workspace WS`
    assert args[args.index("--dataset") + 1] == dataset
    res = invoke(*eval_args(dataset, ws, tracking_uri))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["metrics"]["n"] == 4
    name = "tiny" if form == "folder" else "dev"
    assert (ws / "indexes" / name / "manifest.json").exists()
    for args in (
        ["retrieve", "mustard city", "--dataset", dataset, "--workspace", str(ws), "--json"],
        ["eval-retrieval", "--dataset", dataset, "--workspace", str(ws), "--json", "-k", "5"],
        # SHARP reads over the dataset's evidence ranker by default; this dataset has none fitted
        [
            "ask",
            "Where was Gustave Eiffel born?",
            "--dataset",
            dataset,
            "--workspace",
            str(ws),
            "--json",
            "--set",
            "ranker=null",
        ],  # fmt: skip
    ):
        out = invoke(*args)
        assert out.exit_code == 0, (args, out.output)


def test_benchmark_name_with_a_data_dir(tiny_dataset, tmp_path, fake_models, scripted_lms, tracking_uri, monkeypatch):
    monkeypatch.delenv("SHARP_DATA", raising=False)
    data = tmp_path / "datasets"
    shutil.copytree(tiny_dataset, data / "hotpotqa")
    ws = tmp_path / "ws"
    res = invoke(*eval_args("HotpotQA", ws, tracking_uri, "--data-dir", str(data)))
    args = run_suggestion(res)
    assert args[args.index("--data-dir") + 1] == str(data) and args[args.index("--dataset") + 1] == "hotpotqa"
    res = invoke(*eval_args("HotpotQA", ws, tracking_uri, "--data-dir", str(data)))
    assert res.exit_code == 0, res.output


def test_unknown_name_is_the_same_error_everywhere(tmp_path, fake_models):
    ws = ["--workspace", str(tmp_path)]
    for args in (
        ["index", "--dataset", "dev", *ws],
        ["retrieve", "q", "--dataset", "dev", *ws],
        ["eval-retrieval", "--dataset", "dev", *ws],
        ["eval", "--dataset", "dev", *ws, "--tracking-uri", f"sqlite:///{tmp_path / 'ml.db'}"],
        ["ask", "q?", "--dataset", "dev", *ws],
    ):
        res = invoke(*args)
        assert res.exit_code == 2 and "unknown dataset 'dev'" in res.output, args


def test_one_index_folder_for_every_command(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_dataset.parent)
    for spec in ("HotpotQA", "tiny", str(tiny_dataset), str(tiny_dataset / "dev.json")):
        rt = Runtime(dataset=spec, workspace=tmp_path, cache=False)
        assert rt.index_dir().name == dataset_source(spec).name
    assert Runtime(dataset="HotpotQA", workspace=tmp_path, cache=False).index_dir() == tmp_path / "indexes" / "hotpotqa"


def test_relative_path_suggestions_work_from_anywhere(tiny_dataset, tmp_path, fake_models, monkeypatch):
    monkeypatch.chdir(tiny_dataset.parent)
    res = invoke("retrieve", "Eiffel", "--dataset", "tiny", "--workspace", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the suggested command names the folder absolutely
    args = run_suggestion(res)
    assert args[args.index("--dataset") + 1] == str(tiny_dataset)
    assert invoke("retrieve", "Eiffel", "--dataset", str(tiny_dataset), "--workspace", str(tmp_path)).exit_code == 0


def test_resume_and_rebuild_suggestions_work(tiny_dataset, tmp_path, fake_models, fake_embedder):
    class Killed(Exception):
        pass

    class Dying(type(fake_embedder)):
        method = RetrieverConfig().embedding_method  # the default embedder, as `sharp index` records it

        def encode(self, texts, batch_size=None, progress=None):
            raise Killed()

    base = ["--dataset", str(tiny_dataset), "--workspace", str(tmp_path)]
    index = tmp_path / "indexes" / "tiny"
    with pytest.raises(Killed):  # a build killed midway
        build_index(
            dataset_source(str(tiny_dataset)).corpus(), index, RetrieverConfig(), progress=False, embedder=Dying()
        )
    res = invoke("retrieve", "Eiffel", *base)
    assert "incomplete" in res.output and "Resume it with" in res.output
    run_suggestion(res)
    # built with other BM25 settings than asked: the --rebuild suggestion works
    res = invoke("retrieve", "Eiffel", *base, "--retriever-set", "bm25_k1=2.0")
    assert "does not match" in res.output and "--rebuild" in res.output
    args = suggested(res.output)
    assert invoke(*args, "--no-progress", "--retriever-set", "bm25_k1=2.0").exit_code == 0
    assert invoke("retrieve", "Eiffel", *base, "--retriever-set", "bm25_k1=2.0").exit_code == 0
