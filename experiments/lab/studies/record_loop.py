"""Study input: SHARP's loop recorded in explore mode on held-out train questions (read by loop_analysis).

One recording per question (optimize.replay.record: every round's critique, bridge query, retrieval and
answer), resumable; `loop_analysis` reads it. The held-out questions are the train split's seeded order
after the first ``--offset`` (the reranker trains on the first 478), so the reranker never saw them.

    python -m experiments.lab.studies.record_loop --dataset hotpotqa --offset 478 --limit 120 \
        --set bridge=always --retriever-set second_hop=true --retriever-set reranker=hotpotqa OUT.jsonl
"""

from __future__ import annotations

import argparse
import logging

from experiments import options as o
from experiments.runtime import Runtime
from optimize.replay import record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="train")
    ap.add_argument("--offset", type=int, default=478)
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("--max-retries", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="SharpConfig key=value")
    ap.add_argument("--retriever-set", action="append", default=[], help="RetrieverConfig key=value")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(dataset=args.dataset, retriever_config=o.parse_sets(args.retriever_set, "--retriever-set"))
    examples = rt.examples(args.split, limit=args.offset + args.limit, seed=0)[args.offset :]
    program = rt.system("sharp", o.parse_sets(args.set))
    done = record(program, examples, args.max_retries, args.out)
    logging.info("recorded %d questions in %s", len(done), args.out)


if __name__ == "__main__":
    main()
