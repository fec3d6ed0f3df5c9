"""Each hop of the chain scored against gold, on train (issue 38 item 5): from a recording of chain rounds.

    python -m experiments.lab.studies.chain_hops --dataset 2wikimultihopqa --program program/compiled/sharp-2wikimultihopqa.json \\
        --recording workspace/recordings/2wikimultihopqa-train.jsonl --n 464 \\
        --ceiling experiments/results/chain/hop-ceiling-2wikimultihopqa.jsonl --json experiments/results/chain/hops-2wikimultihopqa.json

Per bridge (today's form classifier) with a recorded chain: how its plan was written (by rule, by the planner
LM, refused and why); hop 1's answer against the gold intermediate answer (2Wiki's evidence objects, MuSiQue's
decomposition answers; "same entity" where the normalised answers match or hop 2 read the gold entity's own
passage, since names differ: "Usher" for "Usher Raymond IV"); the chain's and the draft's EM; gold complete in
the draft's evidence and in the union of the passages the chain's hops read, with the passages read a question.
``--ceiling FILE`` adds the gold-plan ceiling of this reader: hop 2 asked with the gold hop-1 answer written in,
searched and read as the chain reads it (one LM call a question, recorded in FILE and resumed from it; the
only part that calls the model). ``--set KEY=VALUE`` (repeatable) reads the ceiling's hops with the program's
config changed so (``--set passage_chars=2400``: the whole of the entity's passage): a variant of the hop read
measured on gold hop 1 before any chain is recorded again; give it its own FILE. The ceiling's answers are sorted
as ``bridge_misses`` sorts them.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from experiments.keyvalue import parse_sets
from experiments.lab.studies import show
from experiments.lab.studies.bridge_misses import KINDS, kind_of
from experiments.lab.studies.lever_selection import load
from optimize.metrics import exact_match, gold_answers
from program.lm.accounting import Ledger
from program.sharp.chain import read_hop
from program.sharp.forms import question_form
from program.sharp.plans import Plan, substitute
from program.sharp.spans import words
from program.tracing import Budget, Tracer


def _norm(text: str) -> str:
    return " ".join(words(text))


def _same(a: str | None, b: str) -> bool:
    return a is not None and bool(_norm(a)) and _norm(a) == _norm(b)


def _complete(titles: set[str], gold: list[str]) -> bool:
    return bool(gold) and set(gold) <= titles


def question_row(ex: Any, rec: dict) -> dict[str, Any] | None:
    """One bridge's hop-by-hop figures from its record (None: not a bridge, or no chain recorded)."""
    rounds = {r["action"]: r for r in rec.get("rounds") or []}
    chain, draft = rounds.get("chain"), rounds.get("draft")
    if rec.get("form") != "bridge" or chain is None or draft is None:
        return None
    gold = [ex.answer, *ex.answer_aliases]
    plan = chain.get("plan") or {}
    hops, answers = chain.get("hops") or [], chain.get("hop_answers") or []
    done = not chain.get("fallback") and len(answers) == len(hops) and bool(hops)
    gold_hops = list(getattr(ex, "gold_hops", None) or [])
    titled = [
        s.get("titled_ids") or []
        for s in chain.get("steps") or []
        if s.get("role") == "retriever" and s.get("hop") == 2
    ]
    hop2_titles = {p["title"] for p in hops[1]["evidence"]} if len(hops) > 1 else set()
    gold_titles = list(ex.gold_titles)
    union = {p["title"] for h in hops for p in h["evidence"]}
    draft_titles = {p["title"] for p in (draft.get("read") or {}).get("evidence") or []}
    hop1 = answers[0] if answers else None
    return {
        "id": ex.id,
        "plan": "refused" if str(chain.get("fallback") or "").startswith("plan refused") else plan.get("by"),
        "refused": chain["fallback"] if str(chain.get("fallback") or "").startswith("plan refused") else None,
        "hops": len(plan.get("hops") or []),
        "stopped": chain.get("fallback") if not str(chain.get("fallback") or "").startswith("plan refused") else None,
        "done": done,
        "hop1_gold": gold_hops[0][1] if gold_hops else None,
        "hop1_exact": _same(hop1, gold_hops[0][1]) if gold_hops else None,
        "hop1_same_entity": (_same(hop1, gold_hops[0][1]) or bool(set(gold_titles[1:2]) & hop2_titles and titled))
        if gold_hops
        else None,
        "chain_em": float(done and exact_match(answers[-1], gold)),
        "union_em": float(done and chain.get("read") is not None and exact_match(chain["read"]["answer"], gold)),
        "draft_em": float(exact_match(draft["read"]["answer"], gold)),
        "gold_complete_draft": _complete(draft_titles, gold_titles),
        "gold_complete_chain": _complete(union | draft_titles, gold_titles)
        if done
        else _complete(draft_titles, gold_titles),
        "gold_complete_hops": _complete(union, gold_titles),
        "passages_draft": len(draft_titles),
        "passages_chain": len(union | draft_titles),
    }


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def summary(rows: list[dict]) -> dict[str, Any]:
    n = len(rows)
    out: dict[str, Any] = {"bridges with a chain": n}
    for by in ("rule", "planner", "refused"):
        out[f"plan {by}"] = round(sum(r["plan"] == by for r in rows) / n, 4) if n else None
    out["chain done (every hop answered)"] = _mean(rows, "done")
    for key in ("hop1_exact", "hop1_same_entity", "draft_em", "chain_em", "union_em", "gold_complete_draft",
                "gold_complete_chain", "gold_complete_hops", "passages_draft", "passages_chain"):  # fmt: skip
        out[key] = _mean(rows, key)
    done = [r for r in rows if r["done"]]
    out["draft right, chain wrong (chains done)"] = sum(r["draft_em"] > r["chain_em"] for r in done)
    out["chain right, draft wrong (chains done)"] = sum(r["chain_em"] > r["draft_em"] for r in done)
    stops: dict[str, int] = {}
    for r in rows:
        reason = r["stopped"] or r["refused"] or ""
        if reason:
            key = reason.split(":")[0] if reason.startswith("hop") else reason.split(":")[1].strip()
            stops[key] = stops.get(key, 0) + 1
    out["stops"] = dict(sorted(stops.items(), key=lambda kv: -kv[1]))
    return out


def ceiling(program: Any, examples: list, records: dict, path: Path) -> list[dict]:
    """Hop 2 with the gold hop-1 answer written in, searched and read as the chain reads it; resumed from
    ``path`` (one JSON row a question)."""
    done = {}
    if path.exists():
        done = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    path.parent.mkdir(parents=True, exist_ok=True)
    for ex in examples:
        rec = records[ex.id]
        chain = next((r for r in rec.get("rounds") or [] if r["action"] == "chain"), None)
        gold_hops = list(getattr(ex, "gold_hops", None) or [])
        if ex.id in done or chain is None or rec.get("form") != "bridge" or len(gold_hops) < 2:
            continue
        plan = Plan.from_record(chain["plan"]) if chain.get("plan") else None
        if plan is None or len(plan.hops) < 2 or str(chain.get("fallback") or "").startswith("plan refused"):
            continue
        tr = Tracer(Budget(max_lm_calls=None), Ledger(), observer=None)
        query = substitute(plan.hops[1], [gold_hops[0][1]])
        read, answer, why = read_hop(program, query, [gold_hops[0][1]], tr, 1, 2)  # as the chain reads a hop
        gold2 = gold_hops[1][1] if len(plan.hops) > 2 else ex.answer
        aliases = [gold2] if len(plan.hops) > 2 else [ex.answer, *ex.answer_aliases]
        said = read.answer if read is not None else ""
        row = {"id": ex.id, "query": query, "answer": said, "hop_answer": answer, "stopped": why or None,
               "gold": gold2, "em": float(exact_match(answer or said, aliases))}  # fmt: skip
        with path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        done[ex.id] = row
    return [done[ex.id] for ex in examples if ex.id in done]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--program", type=Path, required=True)
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--n", type=int, required=True, help="the first N seeded train questions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ceiling", type=Path, default=None, help="record (and resume) hop 2 read with gold hop 1")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="KEY=VALUE over the program's config for the ceiling's reads (repeatable)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    if args.sets and args.ceiling is None:  # the recorded chains were read as recorded: only the ceiling reads anew
        ap.error("--set changes how the ceiling's hops are read: give --ceiling FILE too")
    rt, program, _, examples, records = load(args, args.n)
    bridges = [ex for ex in examples if question_form(ex.question) == "bridge"]
    rows = [r for ex in bridges if (r := question_row(ex, records[ex.id])) is not None]
    out: dict[str, Any] = {"positions": f"train 0:{len(examples)} (seed {args.seed})", "bridges": len(bridges),
                           "program": str(args.program), **summary(rows)}  # fmt: skip
    if args.ceiling is not None:
        changes = parse_sets(args.sets, "--set")
        if changes:
            program.config = program.config.replace(**changes)  # a bad key or value: the config's own error
        got = ceiling(program, bridges, records, args.ceiling)
        by_id = {ex.id: ex for ex in bridges}
        kinds = Counter(kind_of(by_id[r["id"]].question, r["answer"] or "", gold_answers(by_id[r["id"]])) for r in got)
        out["hop 2 with the gold hop 1 (the reader's ceiling)"] = {
            "questions": len(got),
            "em": _mean(got, "em"),
            "config changed": changes,
            "answers as read, sorted": {k: kinds.get(k, 0) for k in KINDS},
        }
    show(out, args.json)


if __name__ == "__main__":
    main()
