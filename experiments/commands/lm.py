"""`sharp lm serve | info | bench`: the local models as a shared server, their files, their speed.

llama.cpp and the weights load inside the commands, so `sharp --help` stays fast.
"""

from __future__ import annotations

import json
import logging
import sys

import typer

from experiments import options as o

log = logging.getLogger(__name__)

lm_app = typer.Typer(
    help="Local language models: serve one to several processes, list them, time them.", no_args_is_help=True
)

ModelOpt = typer.Option(
    "local/qwen2.5-coder-1.5b", "--model", "-m", help="A local model: local/NAME (see `sharp lm info`)."
)
NCtx = typer.Option(8192, "--n-ctx", help="Context window in tokens (prompt + answer).")
NThreads = typer.Option(2, "--n-threads", help="CPU threads for llama.cpp.")
BenchModels = typer.Option(None, "--model", "-m", help="Local model(s) to time (default: all installed).")


@lm_app.command("serve", cls=o.Command)
def serve(
    model: str = ModelOpt,
    port: int = typer.Option(8008, "--port", "-p"),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (keep 127.0.0.1 unless you mean it)."),
    n_ctx: int = NCtx,
    n_threads: int = typer.Option(2, "--n-threads", help="CPU threads for llama.cpp, per slot."),
    parallel: int = typer.Option(
        1, "--parallel", min=1, max=64, help="Slots: copies of the model answering requests side by side (memory x N)."
    ),
) -> None:
    """Serve a local model as an OpenAI-compatible endpoint so several processes share one loaded model."""
    from program.lm.local import get_session, new_session
    from program.lm.server import SERVED_ALIAS, make_server
    from program.lm.specs import SERVED_MODEL

    try:
        sessions = [get_session(model, n_ctx=n_ctx, n_threads=n_threads)]
        sessions += [new_session(model, n_ctx=n_ctx, n_threads=n_threads) for _ in range(parallel - 1)]
        server = make_server(sessions, host, port)
    except OSError as exc:  # e.g. the port is taken (a SharpError is the Command's error exit)
        o.fail(exc)
    base = f"http://{host}:{server.server_address[1]}/v1"
    print(
        f"serving {model} as '{SERVED_ALIAS}' on {base} (n_ctx={sessions[0].n_ctx}, n_threads={n_threads}, "
        f"{parallel} slot{'s' if parallel > 1 else ''}); Ctrl-C stops it",
        flush=True,
    )
    print(f"use it with:  --lm {SERVED_MODEL} --api-base {base}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@lm_app.command("info", cls=o.Command)
def info(
    verify: bool = typer.Option(False, "--verify", help="Assemble missing files and re-hash every file (slow)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """List the local models: packages installed, assembled file, pinned sha256, hash checked."""
    from program.errors import ModelFileError
    from program.lm.local_files import (
        is_verified,
        model_cache_dir,
        model_path,
        model_status,
    )
    from program.lm.specs import LOCAL_MODELS

    rows = []
    for model in LOCAL_MODELS.values():
        if verify and not model_status(model)["missing"]:
            try:
                path = model_path(model)
                is_verified(path, model.sha256, rehash=True)
            except ModelFileError as exc:
                log.error("%s", exc)
        rows.append(model_status(model))
    try:
        import llama_cpp

        engine = f"llama-cpp-python {llama_cpp.__version__}"
    except ImportError:
        engine = "llama-cpp-python not installed: pip install 'llama-cpp-python[server]==0.3.36'"
    if as_json:
        sys.stdout.write(json.dumps({"engine": engine, "cache": str(model_cache_dir()), "models": rows}) + "\n")
    else:
        _show_models(rows, f"local models (cache: {model_cache_dir()}; engine: {engine})")


def _show_models(rows: list[dict], title: str) -> None:
    from rich.table import Table

    from experiments.console.terminal import console

    table = Table(title=title)
    table.add_column("model", no_wrap=True)
    for col in ("packages", "file", "MiB", "sha256 (pinned)", "hash ok"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["model"],
            "ok" if r["packages_ok"] else f"missing {len(r['missing'])}",
            r["path"] or "-",
            str(r["size_mb"] or "-"),
            r["sha256"][:12] + "…",
            "yes" if r["verified"] else "not checked yet",
        )
    console.print(table)
    for r in rows:
        if not r["packages_ok"]:
            console.print(f"{r['model']}: {r['install']}")


@lm_app.command("bench", cls=o.Command)
def bench(
    models: list[str] | None = BenchModels,
    repeats: int = typer.Option(2, "--repeats", help="Timed runs per measurement (the best is kept)."),
    n_threads: int = NThreads,
) -> None:
    """Prompt and generation tokens/s of local models on this machine, one at a time."""
    from experiments.jobs import lm_timing

    try:  # a missing package or engine is a SharpError (the command's one error exit); an unwritable workspace too
        rows, out = lm_timing.time_models(models or None, repeats=repeats, n_threads=n_threads)
    except OSError as exc:
        o.fail(exc)
    for row in rows:
        typer.echo(lm_timing.row_line(row))
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(lm_app, name="lm")
