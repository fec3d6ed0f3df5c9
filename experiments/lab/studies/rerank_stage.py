"""Study behind the reranker's place in the retrieval stack: where the trained reranker goes (no LM).

Variants: hybrid; hybrid + second hop; the reranker over hybrid's top 20; over the hop's combined list
(rerank after the hop); under the hop (each search reranked against its own query, then combined).
Prints recall@k and all-gold@k at k = 3, 5, 7 for each.

    python -m experiments.lab.studies.rerank_stage --dataset hotpotqa --reranker hotpotqa --offset 478 --limit 120
"""

from __future__ import annotations

import argparse
import json
import sys

from experiments import settings
from experiments.jobs.evaluation import evaluate_retriever
from experiments.runtime import Runtime
from program.retrieval.hop import HopRetriever
from program.retrieval.reranker import CrossEncoderReranker, RerankingRetriever


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="train")
    ap.add_argument("--reranker", default="hotpotqa")
    ap.add_argument("--offset", type=int, default=478)
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--variants", default=None, help="Comma-separated subset of the variants (default: all).")
    args = ap.parse_args()
    rt = Runtime(dataset=args.dataset)
    questions = rt.examples(args.split, limit=args.offset + args.limit, seed=0)[args.offset :]
    hybrid = rt.retriever()
    cfg = rt.retriever_settings({"second_hop": True})
    scorer = CrossEncoderReranker(settings.rerankers_dir(rt.workspace) / args.reranker)

    def hop(base):
        return HopRetriever(base, cfg.hop_keep, cfg.hop_seeds, cfg.hop_seed_chars, cfg.hop_depth, cfg.rrf_k)

    variants = {
        "hybrid": hybrid,
        "hybrid+hop": hop(hybrid),
        "rerank(hybrid)": RerankingRetriever(hybrid, scorer, args.depth),
        "rerank(hop)": RerankingRetriever(hop(hybrid), scorer, args.depth),
        "hop(rerank)": hop(RerankingRetriever(hybrid, scorer, args.depth)),
    }
    if args.variants:
        wanted = args.variants.split(",")
        unknown = [v for v in wanted if v not in variants]
        if unknown:
            ap.error(f"unknown variants {unknown}; known: {', '.join(variants)}")
        variants = {k: variants[k] for k in wanted}
    out = {}
    for name, r in variants.items():
        r.depends_on_k = True  # ask once per cutoff
        metrics, latency = evaluate_retriever(r, questions, 7, batch=1, ks=[3, 5, 7])
        ov = metrics["overall"]
        out[name] = {
            **{k: ov[k] for k in ov if k.startswith(("recall@", "all_gold@"))},
            "p50_ms": latency.get("p50_ms"),
        }
        sys.stderr.write(f"{name}: {json.dumps(out[name])}\n")
    sys.stdout.write(json.dumps({"n": len(questions), "variants": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
