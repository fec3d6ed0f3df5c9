"""Study of SHARP's loop: what each round, query source and critic signal is worth, read from a recording.

Per round: all-gold of the evidence and of the whole pool, EM/F1 of the round's answer; per query source
(the question, planner sub-queries, the critic's suggestions, the bridge step): how often its hits hold a
gold paragraph the pool lacked; the critic: AUROC of its token P(sufficient) and of a logistic regression
over the critique features (cross-validated by question); the best fixed round and an oracle stop.

    python -m experiments.lab.studies.loop_analysis --dataset hotpotqa --offset 478 --limit 120 REC.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from experiments.runtime import Runtime, load_dataset_corpus
from optimize.metrics import evidence_complete, exact_match, f1_score, gold_answers
from program.calibration import FEATURES


def _auroc(scores: list[float], labels: list[bool]) -> float | None:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def critic_study(cases: list[dict], features: tuple[str, ...] = FEATURES, folds: int = 5) -> dict:
    """AUROC of token P(sufficient), and of a logistic regression over ``features`` (question-grouped CV)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.preprocessing import StandardScaler

    labels = [c["label"] for c in cases]
    out = {"cases": len(cases), "complete": sum(labels), "auroc_p_token": _auroc([c["p"] for c in cases], labels)}
    X = np.array([[c["features"][f] for f in features] for c in cases])
    y = np.array(labels, dtype=int)
    groups = [c["qid"] for c in cases]
    preds = np.zeros(len(cases))
    for train, test in GroupKFold(n_splits=min(folds, len(set(groups)))).split(X, y, groups):
        scaler = StandardScaler().fit(X[train])
        model = LogisticRegression(C=1.0, max_iter=1000).fit(scaler.transform(X[train]), y[train])
        preds[test] = model.predict_proba(scaler.transform(X[test]))[:, 1]
    out["auroc_calibrator_cv"] = _auroc(list(preds), labels)
    for f in features:
        out[f"auroc_{f}"] = _auroc([c["features"][f] for c in cases], labels)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--split", default="train")
    ap.add_argument("--offset", type=int, default=478)
    ap.add_argument("--limit", type=int, default=120)
    args = ap.parse_args()
    rt = Runtime(dataset=args.dataset)
    examples = {e.id: e for e in rt.examples(args.split, limit=args.offset + args.limit, seed=0)[args.offset :]}
    titles = {p.id: p.title for p in load_dataset_corpus(args.dataset, None)}
    recs = [json.loads(line) for line in Path(args.recording).read_text().splitlines() if line.strip()]
    recs = [r for r in recs if r.get("id") in examples and not r.get("error")]
    per_round: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    sources: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # source -> [queries, found a missing gold]
    cases, best_em, best_f1 = [], [], []
    for rec in recs:
        ex = examples[rec["id"]]
        gold, golds = list(ex.gold_titles), gold_answers(ex)
        pool: set[str] = set()
        ems, f1s = [], []
        sub = set(rec["sub_queries"])
        prev = None
        for rnd in rec["rounds"]:
            r = rnd["round"]
            step = rnd["retriever"]
            before = set(pool)
            for query, ids in zip(step["queries"], step["retrieved_ids"]):
                found = {titles.get(i, "") for i in ids}
                pool |= found
                if r == 0:
                    src = "question" if query == rec["question"] else "planner" if query in sub else "other"
                else:
                    bridge = [s.get("query") for s in (prev or {}).get("query_steps", []) if s.get("role") == "bridge"]
                    src = "bridge" if query in bridge else "critic"
                missing = {t.lower() for t in gold} - {t.lower() for t in before}
                sources[f"r{r}:{src}"][0] += 1
                sources[f"r{r}:{src}"][1] += bool(missing & {t.lower() for t in found})
            ev = [e["title"] for e in rnd["evidence"]]
            em, f1 = exact_match(rnd["answer"], golds), f1_score(rnd["answer"], golds)
            ems.append(em)
            f1s.append(f1)
            pr = per_round[r]
            pr["all_gold_evidence"].append(float(evidence_complete(gold, ev)))
            pr["all_gold_pool"].append(float(evidence_complete(gold, pool)))
            pr["em"].append(em)
            pr["f1"].append(f1)
            crit = rnd.get("critic")
            if crit and crit.get("features"):
                cases.append(
                    {
                        "qid": rec["id"],
                        "label": evidence_complete(gold, crit["evidence_titles"]),
                        "p": crit["p_sufficient"],
                        "features": crit["features"],
                    }
                )
            prev = rnd
        best_em.append(max(ems))
        best_f1.append(max(f1s))
    mean = lambda xs: round(sum(xs) / len(xs), 3) if xs else None  # noqa: E731
    out = {
        "questions": len(recs),
        "rounds": {r: {k: mean(v) for k, v in d.items()} | {"n": len(d["em"])} for r, d in sorted(per_round.items())},
        "oracle_stop": {"em": mean(best_em), "f1": mean(best_f1)},
        "query_sources": {
            s: {"queries": n, "found_missing_gold": h, "rate": round(h / n, 3) if n else None}
            for s, (n, h) in sorted(sources.items())
        },
        "critic": critic_study(cases) if len(cases) >= 10 else None,
    }
    sys.stdout.write(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
