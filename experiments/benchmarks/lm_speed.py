"""Prompt and generation tokens/s of each local model on this machine, one model at a time.

    python -m experiments.benchmarks.lm_speed [--model local/qwen2.5-coder-0.5b ...] [--repeats 2]

Prompt speed: a ~600-token prompt evaluated from scratch (no prefix reuse), one output token.
Generation speed: a short prompt, 128 new tokens, minus the short prompt's evaluation time.
Run it alone (the CPU is shared: `flock /tmp/sharp-heavy.lock python -m ...`). Writes
WORKSPACE/benchmarks/lm_speed.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no price-table fetch

import argparse
import gc
import json
import logging
import platform
import time
from pathlib import Path

log = logging.getLogger(__name__)

_FILLER = (
    "The river delta held seven villages, each known for a different craft: weaving, pottery, "
    "boat building, salt drying, rope making, glass blowing and bookbinding. "
)


def _prompt_messages(n_sentences: int) -> list[dict]:
    return [
        {"role": "system", "content": "You summarize text in one word."},
        {"role": "user", "content": _FILLER * n_sentences + "\nOne word:"},
    ]


def time_model(model: str, *, repeats: int = 2, n_threads: int = 2, gen_tokens: int = 128) -> dict:
    from program.lm.local import get_session, unload_all

    t0 = time.perf_counter()
    session = get_session(model, n_ctx=4096, n_threads=n_threads, prefix_cache_bytes=0)
    load_s = time.perf_counter() - t0
    session.chat(_prompt_messages(1), max_tokens=4, prefix_reuse=False)  # warm-up
    prompt = []
    for _ in range(repeats):
        r = session.chat(_prompt_messages(18), max_tokens=1, prefix_reuse=False)
        prompt.append((r.prompt_tokens, r.seconds))
    n_prompt, best_prompt_s = min(prompt, key=lambda x: x[1])
    prompt_tps = n_prompt / best_prompt_s
    short = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
    gen = []
    for _ in range(repeats):
        r = session.chat(short, max_tokens=gen_tokens, temperature=0.0, prefix_reuse=False)
        gen_s = max(r.seconds - r.prompt_tokens / prompt_tps, 1e-6)
        gen.append((r.completion_tokens, gen_s))
    n_gen, best_gen_s = min(gen, key=lambda x: x[1] / max(x[0], 1))
    unload_all()
    gc.collect()
    return {
        "model": model,
        "load_s": round(load_s, 2),
        "prompt_tokens": n_prompt,
        "prompt_tok_s": round(prompt_tps, 1),
        "gen_tokens": n_gen,
        "gen_tok_s": round(n_gen / best_gen_s, 1),
    }


def main(
    models: list[str] | None = None, *, repeats: int = 2, n_threads: int = 2, out: Path | None = None
) -> list[dict]:
    from program.lm.local_files import missing_packages
    from program.lm.specs import LOCAL_MODELS

    if not models:
        models = [f"local/{n}" for n, m in LOCAL_MODELS.items() if not missing_packages(m)]
    rows = []
    for model in models:
        log.info("timing %s", model)
        row = time_model(model, repeats=repeats, n_threads=n_threads)
        print(
            f"{row['model']:28s} load {row['load_s']:5.1f}s  prompt {row['prompt_tok_s']:7.1f} tok/s "
            f"({row['prompt_tokens']} tok)  gen {row['gen_tok_s']:6.1f} tok/s ({row['gen_tokens']} tok)",
            flush=True,
        )
        rows.append(row)
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "n_threads": n_threads},
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rows": rows,
    }
    if out is None:
        from experiments.settings import workspace

        out = workspace() / "benchmarks" / "lm_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return rows


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="local/NAME (repeatable; default: every installed one)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n-threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    main(a.model, repeats=a.repeats, n_threads=a.n_threads, out=a.out)
