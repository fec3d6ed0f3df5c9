"""Study behind SHARP's settings over the evidence ranker: which searches add gold to its top passages.

    python -m experiments.lab.studies.ranked_pool REC.jsonl.gz [--ranker hotpotqa] [--offset 478] [--out OUT.json]

Reads a loop recording of held-out train questions (experiments/results/hotpotqa-train-loop/recording.jsonl.gz,
made by experiments/lab/studies/record_loop.py before the ranker existed) for the LM-written searches it holds
(the planner's sub-queries, the first bridge entity, the critic's first retry query), searches them again
through the evidence ranker, and reports all-gold of the capped evidence (no LM call) for:

* the question alone, top 3 / 5 / 7;
* the question plus the planner's sub-queries, the pool ranked by the ranker's probability;
* the question plus one retry search, written alone or as "QUESTION QUERY" (retry_with_question);
and, over the question's own top 5, the AUROC of each ranker probability for "all gold is there" (what a
calibrated stop rule can read without asking the critic).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path


def _first(rec: dict, role: str) -> str | None:
    for rnd in rec.get("rounds") or []:
        for step in rnd.get("query_steps") or []:
            if step.get("role") == role and step.get("query"):
                return step["query"]
    return None


def study(recs: list[dict], examples: dict, ranked) -> dict:
    from optimize.metrics import auroc, evidence_complete
    from program.reading.evidence import EvidencePool

    hits: dict[str, float] = defaultdict(float)
    scored: list[tuple[list[float], bool]] = []
    n = 0
    for rec in recs:
        ex = examples.get(rec.get("id"))
        if ex is None or rec.get("error"):
            continue
        n += 1
        q, gold = ex.question, ex.gold_titles
        top = ranked.retrieve(q, 7)
        for k in (3, 5, 7):
            hits[f"question, top {k}"] += evidence_complete(gold, [p.title for p in top[:k]])
        subs = (rec.get("head", {}).get("steps") or [{}])[0].get("sub_queries") or []
        pool = EvidencePool()
        for query, ps in zip([q, *subs], ranked.retrieve_many([q, *subs], 5)):
            pool.add(query, ps)
        hits["question + planner sub-queries, top 5 by probability"] += evidence_complete(
            gold, [p.title for p in pool.select(5, "score")]
        )
        retry = {
            "bridge entity": _first(rec, "bridge"),
            "critic query": next((x for r in rec["rounds"] for x in r.get("next_queries") or []), None),
        }
        for source, query in retry.items():
            for written, text in (("alone", query), ("after the question", f"{q} {query}" if query else None)):
                pool = EvidencePool()
                pool.add(q, top)
                if text:
                    pool.add(text, ranked.retrieve(text, 7))
                for k in (3, 5):
                    hits[f"question + {source} written {written}, top {k}"] += evidence_complete(
                        gold, [p.title for p in pool.select(k, "score")]
                    )
        scored.append(([p.score for p in top[:5]] + [0.0] * 5, evidence_complete(gold, [p.title for p in top[:5]])))
    out = {"questions": n, "all_gold": {k: round(v / n, 3) for k, v in hits.items()}}
    out["auroc_of_rank_probability"] = {
        f"score_{i + 1}": round(auroc([s[i] for s, y in scored if y], [s[i] for s, y in scored if not y]) or 0.0, 3)
        for i in range(3)
    }
    return out


def main(argv: list[str] | None = None) -> int:
    from experiments.runtime import Runtime

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording", type=Path)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--ranker", default="hotpotqa")
    ap.add_argument("--offset", type=int, default=478)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rt = Runtime(dataset=args.dataset)
    examples = {ex.id: ex for ex in rt.examples("train", limit=1 << 30, seed=0)[args.offset :]}
    opener = gzip.open if args.recording.suffix == ".gz" else open
    with opener(args.recording, "rt") as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    result = study(recs, examples, rt.retriever({"ranker": args.ranker}))
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
