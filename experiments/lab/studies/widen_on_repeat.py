"""Study of the no_new_queries stop: would re-asking the same queries at a wider k rescue it? No LM needed.

    python -m experiments.lab.studies.widen_on_repeat RESULTS.jsonl [--dataset 2wikimultihopqa] [--split dev]

SHARP stops with ``no_new_queries`` when the critic asks for more evidence but suggests only searches
already made. The alternative policy re-issues every query asked so far at the next round's k. This reads
the finished run's retriever steps, re-retrieves those queries at that k with the run's index, and reports
how often every gold paragraph is then in the evidence shown to the generator (the run's evidence cap,
EvidencePool.select) and anywhere in the pool, before and after. The k schedule, evidence cap and
retriever settings are the run's own, read from RESULTS.meta.json (the defaults without one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.lab.studies.evidence_selection import pooled
from optimize.evaluate import read_results
from program.sharp import SharpConfig
from program.types import Passage


def main(argv: list[str] | None = None) -> None:
    from experiments.runtime import Runtime, load_dataset_corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="dev")
    args = ap.parse_args(argv)
    meta_path = args.results.with_name(args.results.name.removesuffix(".jsonl") + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    cfg = SharpConfig.from_mapping(meta.get("config"))
    rt = Runtime(dataset=args.dataset)
    titles = {p.id: p.title.strip().lower() for p in load_dataset_corpus(rt.dataset, rt.data_dir)}
    golds = {ex.id: {t.strip().lower() for t in ex.gold_titles} for ex in rt.examples(args.split)}
    retriever = rt.retriever(meta.get("retriever"))
    rows = [r for r in read_results(args.results) if isinstance(r, dict)]
    stopped = [r for r in rows if r.get("stop_reason") == "no_new_queries" and r.get("trace")]
    counts = {"evidence_before": 0, "evidence_after": 0, "pool_before": 0, "pool_after": 0}
    for row in stopped:
        gold, pool = golds[row["id"]], pooled(row["trace"])

        def covered(ids: list[str], gold: set[str] = gold) -> bool:
            return gold <= {titles.get(i, "") for i in ids}

        def tally(when: str, pool: Any = pool) -> None:
            counts[f"evidence_{when}"] += covered([p.id for p in pool.select(cfg.evidence_cap)])
            counts[f"pool_{when}"] += covered([p.id for ps in pool.by_query.values() for p in ps])

        tally("before")
        k = cfg.k_for_round(row.get("retries", 0) + 1)
        queries = list(pool.by_query)
        for query, passages in zip(queries, retriever.retrieve_many(queries, k)):
            pool.add(query, [Passage(p.id, "", "") for p in passages])
        tally("after")
    sys.stdout.write(
        f"{len(stopped)} of {len(rows)} questions stopped on no_new_queries; all gold paragraphs "
        f"in the evidence ({cfg.evidence_cap}): {counts['evidence_before']} -> {counts['evidence_after']}; "
        f"in the pool: {counts['pool_before']} -> {counts['pool_after']}\n"
    )


if __name__ == "__main__":
    main()
