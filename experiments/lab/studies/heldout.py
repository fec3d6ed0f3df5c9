"""Write a split's held-out questions (after the first N seeded ones) as a dataset folder any command reads.

    python -m experiments.lab.studies.heldout --dataset hotpotqa --split train --offset 478 OUT_DIR

The first N seeded train questions fit the evidence ranker (`sharp fit-ranker`); the rest are held out
for choosing SHARP's settings (never dev). OUT_DIR/dev.json holds them in the dataset's own format and
OUT_DIR/corpus.jsonl links to its corpus, so `sharp index --dataset OUT_DIR`, `sharp eval` and
`sharp arena --dataset OUT_DIR --split dev` run on exactly those questions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from experiments.runtime import Runtime

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="train")
    ap.add_argument("--offset", type=int, default=478)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rt = Runtime(dataset=args.dataset)
    keep = {str(ex.id) for ex in rt.examples(args.split, limit=1 << 30, seed=args.seed)[args.offset :]}
    source = rt.source
    rows = json.loads(Path(source.folder() / f"{args.split}.json").read_text())
    held = [r for r in rows if str(r.get("_id", r.get("id"))) in keep]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dev.json").write_text(json.dumps(held))
    link = args.out / "corpus.jsonl"
    if not link.exists():
        link.symlink_to(source.corpus_file().resolve())
    sys.stdout.write(f"{len(held)} questions in {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
