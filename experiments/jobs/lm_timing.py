"""Prompt and generation tokens/s of a local model on this machine (`sharp lm bench`, `make bench`).

Prompt speed: a ~600-token prompt evaluated from scratch (no prefix reuse), one output token.
Generation speed: a short prompt, ``gen_tokens`` new tokens, minus the short prompt's evaluation time
at the measured prompt speed. The best of ``repeats`` runs is kept for each. The CPU is shared: run
it alone (`flock /tmp/sharp-heavy.lock sharp lm bench`).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_FILLER = (
    "The river delta held seven villages, each known for a different craft: weaving, pottery, "
    "boat building, salt drying, rope making, glass blowing and bookbinding. "
)
STORY = "Write a long story about a lighthouse keeper and a storm."


def prompt_messages(n_sentences: int) -> list[dict]:
    return [
        {"role": "system", "content": "You summarize text in one word."},
        {"role": "user", "content": _FILLER * n_sentences + "\nOne word:"},
    ]


def measure_session(session: Any, *, repeats: int = 2, gen_tokens: int = 128, n_sentences: int = 18) -> dict:
    """Prompt and generation tokens/s of a loaded session (anything with LocalSession's ``chat``)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    session.chat(prompt_messages(1), max_tokens=4, prefix_reuse=False)  # warm-up
    prompt = []
    for _ in range(repeats):
        r = session.chat(prompt_messages(n_sentences), max_tokens=1, prefix_reuse=False)
        prompt.append((r.prompt_tokens, r.seconds))
    n_prompt, best_prompt_s = min(prompt, key=lambda x: x[1])
    prompt_tps = n_prompt / max(best_prompt_s, 1e-9)
    short = [{"role": "user", "content": STORY}]
    gen = []
    for _ in range(repeats):
        r = session.chat(short, max_tokens=gen_tokens, temperature=0.0, prefix_reuse=False)
        gen_s = max(r.seconds - r.prompt_tokens / prompt_tps, 1e-6)
        gen.append((r.completion_tokens, gen_s))
    n_gen, best_gen_s = min(gen, key=lambda x: x[1] / max(x[0], 1))
    return {
        "prompt_tokens": n_prompt,
        "prompt_seconds": round(best_prompt_s, 4),
        "prompt_tok_s": round(prompt_tps, 1),
        "gen_tokens": n_gen,
        "gen_seconds": round(best_gen_s, 4),
        "gen_tok_s": round(n_gen / best_gen_s, 1),
    }


def time_model(model: str, *, repeats: int = 2, n_threads: int = 2, gen_tokens: int = 128) -> dict:
    """Load ``model`` fresh (no prefix cache), measure it, unload it."""
    from program.lm.local import get_session, unload_all

    t0 = time.perf_counter()
    session = get_session(model, n_ctx=4096, n_threads=n_threads, prefix_cache_bytes=0)
    load_s = time.perf_counter() - t0
    try:
        row = measure_session(session, repeats=repeats, gen_tokens=gen_tokens)
    finally:
        unload_all()
        gc.collect()
    return {"model": model, "load_s": round(load_s, 2), "n_threads": n_threads, **row}


def installed_models() -> list[str]:
    """Every local model whose weight packages are installed."""
    from program.lm.local_files import missing_packages
    from program.lm.specs import LOCAL_MODELS

    return [f"local/{n}" for n, m in LOCAL_MODELS.items() if not missing_packages(m)]


def time_models(
    models: list[str] | None = None, *, repeats: int = 2, n_threads: int = 2, out: Path | None = None
) -> tuple[list[dict], Path]:
    """Time each model (default: every installed one) one at a time; write the rows to ``out``
    (default WORKSPACE/benchmarks/lm_speed.json); return (rows, out)."""
    rows = []
    for model in models or installed_models():
        log.info("timing %s", model)
        rows.append(time_model(model, repeats=repeats, n_threads=n_threads))
        log.info("%s", row_line(rows[-1]))
    if out is None:
        from experiments.settings import workspace

        out = workspace() / "benchmarks" / "lm_speed.json"
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "n_threads": n_threads}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "when": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, indent=2))
    return rows, out


def row_line(row: dict) -> str:
    return (
        f"{row['model']:28s} load {row['load_s']:5.1f}s  prompt {row['prompt_tok_s']:7.1f} tok/s "
        f"({row['prompt_tokens']} tok)  gen {row['gen_tok_s']:6.1f} tok/s ({row['gen_tokens']} tok)"
    )
