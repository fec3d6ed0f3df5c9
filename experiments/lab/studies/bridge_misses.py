"""What a program's wrong answers to bridge questions are, on train, by replay (no LM call).

    python -m experiments.lab.studies.bridge_misses --dataset 2wikimultihopqa \\
        --program program/compiled/sharp-2wikimultihopqa.json \\
        --recording workspace/recordings/2wikimultihopqa-train.jsonl --n 464 \\
        --json experiments/results/chain/bridge-misses-2wikimultihopqa.json

Each bridge of the first N seeded train questions (less the hop planner's demos) is replayed with the program's
policy over the recorded rounds, passages with their text (the span and place rules read it), and its final answer
sorted against gold (the answer and its aliases, normalised as EM normalises):

* ``right``;
* ``kept too much``: gold is how the answer starts ("Sharon, Vermont" for "Sharon");
* ``cut too much``: the answer is how gold starts ("Saginaw" for "Saginaw, Michigan");
* ``one inside the other``: gold's words inside the answer's, or the other way ("Altenstein Castle");
* ``nationality word``: a nationality or country question answered with the other form or another country
  ("French" for "France");
* ``no answer``: the program answered nothing (unknown, empty);
* ``another fact``: the rest: a wrong entity, place or date.

Beside the counts: whether the chain ran to its last hop, the answer's source (which round the select step kept),
where the chain was done but another round kept, how often its last hop (as read, before the rules) was right and
the kept answer wrong, and the other way,
the last hop's relation for a rule plan, and up to ``--examples`` questions of each kind.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from experiments.lab.studies import show
from experiments.lab.studies.lever_selection import load
from optimize.metrics import exact_match, gold_answers, normalize_answer
from optimize.replay import replay
from program.sharp.forms import question_form

KINDS = ("right", "kept too much", "cut too much", "one inside the other", "nationality word", "no answer",
         "another fact")  # fmt: skip
_NATIONALITY = ("nationality", "which country", "what country")


def kind_of(question: str, answer: str, golds: list[str]) -> str:
    """Which kind of answer ``answer`` is against ``golds`` (see the module)."""
    if exact_match(answer, golds):
        return "right"
    a = normalize_answer(answer)
    if a in ("", "unknown"):
        return "no answer"
    gs = [normalize_answer(g) for g in golds if normalize_answer(g)]
    if any(a.startswith(g + " ") for g in gs):
        return "kept too much"
    if any(g.startswith(a + " ") for g in gs):
        return "cut too much"
    if any(f" {g} " in f" {a} " or f" {a} " in f" {g} " for g in gs):
        return "one inside the other"
    if any(cue in question.lower() for cue in _NATIONALITY):
        return "nationality word"
    return "another fact"


def rows_of(rt: Any, program: Any, examples: list, records: dict) -> list[dict[str, Any]]:
    """One row a bridge: its final answer replayed, its kind, the chain's reach and the kept round."""
    passages = rt.passages()
    out = []
    for ex in examples:
        rec = records.get(ex.id)
        if rec is None or question_form(ex.question) != "bridge":
            continue
        pred = replay(rec, program.config, passages)
        chain = {r["action"]: r for r in rec["rounds"]}.get("chain")
        kept = [s for s in pred.trace or [] if s.get("role") == "select"]
        relations = ((chain or {}).get("plan") or {}).get("relations") or []
        golds = gold_answers(ex)
        out.append({
            "id": ex.id,
            "question": ex.question,
            "gold": golds[0] if golds else "",
            "answer": pred.answer,
            "kind": kind_of(ex.question, pred.answer, golds),
            "chain_done": bool(chain) and not chain.get("fallback") and bool(chain.get("hops")),
            "kept": kept[-1].get("action") if kept else None,
            # the chain's last hop as it read it (before the span and place rules): right or not
            "chain_right": bool(chain and chain.get("hop_answers") and exact_match(chain["hop_answers"][-1], golds)),
            "last_relation": relations[-1] if relations else None,
        })  # fmt: skip
    return out


def summary(rows: list[dict[str, Any]], examples: int) -> dict[str, Any]:
    kinds = Counter(r["kind"] for r in rows)
    by_source: dict[str, Counter] = defaultdict(Counter)
    by_relation: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        by_source[f"kept {r['kept']}, chain {'done' if r['chain_done'] else 'stopped or none'}"][r["kind"]] += 1
        if r["last_relation"]:
            by_relation[r["last_relation"]][r["kind"]] += 1
    kept_other = [r for r in rows if r["chain_done"] and r["kept"] != "chain"]
    return {
        "bridges": len(rows),
        "chain done, another round kept: the chain's last hop right, the kept answer wrong": sum(
            r["chain_right"] and r["kind"] != "right" for r in kept_other
        ),
        "chain done, another round kept: the kept answer right, the chain's last hop wrong": sum(
            not r["chain_right"] and r["kind"] == "right" for r in kept_other
        ),
        "kinds": {k: kinds.get(k, 0) for k in KINDS},
        "by the kept round": {k: dict(v) for k, v in sorted(by_source.items())},
        "by the last hop's relation (rule plans)": {
            k: dict(v) for k, v in sorted(by_relation.items(), key=lambda kv: -sum(kv[1].values()))
        },
        "examples": {
            k: [f"{r['question']} | gold {r['gold']!r} | answered {r['answer']!r}" for r in rows if r["kind"] == k][
                :examples
            ]
            for k in KINDS
            if k != "right"
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--program", type=Path, required=True)
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--n", type=int, required=True, help="the first N seeded train questions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=8)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    rt, program, _, examples, records = load(args, args.n)
    rows = rows_of(rt, program, examples, records)
    out = {"positions": f"train 0:{args.n} (seed {args.seed})", "program": str(args.program),
           **summary(rows, args.examples)}  # fmt: skip
    show(out, args.json)


if __name__ == "__main__":
    main()
