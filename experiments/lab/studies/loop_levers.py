"""What SHARP's levers are worth, read from a loop recording on held-out train questions (record_loop).

Three questions, each answered from the recording (and, for ``reasoning``, a few new generator calls):

* ``evidence``: how much of the pool's gold the capped evidence keeps, per round and selection rule, and
  what swapping the follow-up queries' best hits into the second hop's top 5 does (no LM call);
* ``reader``: the generator's EM on rounds whose evidence holds every gold paragraph, and on the rest;
* ``reasoning``: chain-of-thought against the plain generator on the comparison and yes/no questions, on
  the evidence of the round the tuned policy answers from (round 1).

    python -m experiments.lab.studies.loop_levers evidence REC.jsonl
    python -m experiments.lab.studies.loop_levers reasoning REC.jsonl --out rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from experiments.runtime import Runtime, load_dataset_corpus
from optimize.metrics import evidence_complete, exact_match, gold_answers
from program.reading.answers import is_yes_no_question
from program.reading.generation import answer_from_evidence
from program.tracing import traced

CHOICE = re.compile(r"\bor\b[^?]*\?\s*$", re.I)  # "..., A or B?"


def _round_robin(lists: list[list[str]], cap: int) -> list[str]:
    out, seen = [], set()
    for rank in range(max((len(v) for v in lists), default=0)):
        for v in lists:
            if rank < len(v) and v[rank] not in seen:
                seen.add(v[rank])
                out.append(v[rank])
                if len(out) >= cap:
                    return out
    return out


def _rrf(lists: list[list[str]], cap: int, k: int) -> list[str]:
    score: dict[str, float] = defaultdict(float)
    for v in lists:
        for rank, pid in enumerate(v):
            score[pid] += 1.0 / (k + rank + 1)
    return sorted(score, key=lambda p: -score[p])[:cap]


def evidence_study(recs: list[dict], examples: dict, rt: Runtime, cap: int = 5) -> dict:
    title = {p.id: p.title for p in load_dataset_corpus(rt.dataset, None)}
    hop = rt.retriever({"second_hop": True})
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        gold = examples[r["id"]].gold_titles

        def complete(ids: list[str], gold: list[str] = gold) -> float:
            return float(evidence_complete(gold, [title[i] for i in ids]))

        by_query: dict[str, list[str]] = {}
        for rnd in r["rounds"]:
            step = rnd["retriever"]
            for q, ids in zip(step["queries"], step["retrieved_ids"]):
                by_query.setdefault(q, [])
                by_query[q] += [i for i in ids if i not in by_query[q]]
            lists, i = list(by_query.values()), rnd["round"]
            out["pool"][i].append(complete([p for v in lists for p in v]))
            out["round_robin (the program's)"][i].append(complete(_round_robin(lists, cap)))
            out["rrf k=2"][i].append(complete(_rrf(lists, cap, 2)))
            out["rrf k=60"][i].append(complete(_rrf(lists, cap, 60)))
        q5 = [p.id for p in hop.retrieve(r["question"], cap)]
        out["question + second hop, top 5"][0].append(complete(q5))
        out["question + second hop, top 7"][0].append(complete([p.id for p in hop.retrieve(r["question"], 7)]))
        if len(r["rounds"]) > 1:
            firsts = [ids[0] for ids in r["rounds"][1]["retriever"]["retrieved_ids"] if ids and ids[0] not in q5]
            out["top 5 of the hop, the last slot to round 1's best new hit"][1].append(
                complete(q5[: cap - 1] + firsts[:1])
            )
            out["top 5 of the hop, the last two slots to round 1's best new hits"][1].append(
                complete(q5[: cap - 2] + list(dict.fromkeys(firsts))[:2])
            )
    return {name: {i: _mean(v) | {"n": len(v)} for i, v in sorted(d.items())} for name, d in out.items()}


def reader_study(recs: list[dict], examples: dict) -> dict:
    cells: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        ex = examples[r["id"]]
        for rnd in r["rounds"]:
            complete = evidence_complete(ex.gold_titles, [e["title"] for e in rnd["evidence"]])
            key = f"round {rnd['round']}, evidence {'complete' if complete else 'incomplete'}"
            cells[key].append(float(exact_match(rnd["answer"], gold_answers(ex))))
    return {k: _mean(v) | {"n": len(v)} for k, v in sorted(cells.items())}


def reasoning_study(recs: list[dict], examples: dict, rt: Runtime, out_path: Path | None) -> dict:
    by_id = {p.id: p for p in load_dataset_corpus(rt.dataset, None)}
    generators = {flag: rt.system("sharp", {"generator_reasoning": flag}).generator for flag in (False, True)}
    sink = out_path.open("w") if out_path else None
    totals: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        q = r["question"]
        kind = "yes/no" if is_yes_no_question(q) else "choice" if CHOICE.search(q) else None
        if kind is None:
            continue
        rnd = r["rounds"][min(1, len(r["rounds"]) - 1)]
        evidence = [by_id[e["id"]] for e in rnd["evidence"]]
        ex = examples[r["id"]]
        row = {"id": r["id"], "kind": kind}
        for flag, generator in generators.items():
            with traced(q, 2000) as (question, tr):  # reasoning needs room for its text before the answer
                answer, _ = answer_from_evidence(
                    generator, question, evidence, 600, tr, adapter="json", max_tokens=384 if flag else 128
                )
            name = "chain of thought" if flag else "plain"
            row[name] = {"answer": answer, "em": float(exact_match(answer, gold_answers(ex)))}
            totals[name].append(row[name]["em"])
        if sink:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
    return {k: _mean(v) | {"n": len(v)} for k, v in totals.items()}


def _mean(v: list[float]) -> dict:
    return {"mean": round(sum(v) / len(v), 3) if v else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["evidence", "reader", "reasoning"])
    ap.add_argument("recording")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--offset", type=int, default=478)
    ap.add_argument("--out", type=Path, default=None, help="reasoning: one JSON row per question")
    args = ap.parse_args()
    rt = Runtime(dataset=args.dataset)
    examples = {e.id: e for e in rt.examples("train", seed=0, limit=10**6)[args.offset :]}
    recs = [json.loads(line) for line in Path(args.recording).read_text().splitlines() if line.strip()]
    recs = [r for r in recs if not r.get("error") and r.get("id") in examples]
    if args.study == "evidence":
        result = evidence_study(recs, examples, rt)
    elif args.study == "reader":
        result = reader_study(recs, examples)
    else:
        result = reasoning_study(recs, examples, rt, args.out)
    sys.stdout.write(json.dumps({"questions": len(recs), args.study: result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
