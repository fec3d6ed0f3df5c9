"""The sentence selector fitted from a runtime: what `sharp fit-selector` and the sentence-evidence study run.

Cases come from the ranked passages of train questions (the retriever the program reads through), labelled
by the questions' supporting facts (optimize/sentences.py); the selector is saved as plain JSON numbers
(program/sharp/sentences.py) under WORKSPACE/selectors/DATASET.json, inside the config keys a program reads it
with (``--config WORKSPACE/selectors/DATASET.json``: evidence, selector, sentence_passages, sentence_budget).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optimize.sentences import coverage, fit_selector, sentence_cases


def selectors_dir(ws: Path) -> Path:
    return ws / "selectors"


def corpus_sentences(rt: Any) -> dict[str, list[str]]:
    """title -> its sentences, as the dataset's corpus file lists them."""
    with open(rt.source.corpus_file(), encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    return {r["title"]: list(r["text"]) if isinstance(r["text"], list) else [r["text"]] for r in rows}


def gold_sentences(example: Any, sentences: dict[str, list[str]]) -> dict[str, list[str]]:
    """title -> the texts of the example's supporting sentences (none where the ids are unknown)."""
    out: dict[str, list[str]] = {}
    for title, sid in getattr(example, "gold_sentences", None) or []:
        found = sentences.get(title) or []
        if sid is not None and 0 <= int(sid) < len(found):
            out.setdefault(title, []).append(found[int(sid)])
    return out


def items(rt: Any, examples: list, k: int, sentences: dict) -> list[tuple]:
    """(question, its top ``k`` ranked passages, its gold sentences) of every example that has gold sentences."""
    retriever = rt.retriever()
    out = []
    for ex in examples:
        gold = gold_sentences(ex, sentences)
        if gold:
            out.append((ex.question, retriever.retrieve(ex.question, k), gold))
    return out


def fit_from_runtime(rt: Any, n_train: int, n_heldout: int, passages: int, budgets: tuple[int, ...]) -> tuple:
    """(the selector fitted on the first ``n_train`` seeded train questions, a summary: what it was fitted on,
    and its coverage on the next ``n_heldout`` against the top 3 and top ``passages`` passages whole)."""
    examples = rt.examples("train", limit=n_train + n_heldout)
    sentences = corpus_sentences(rt)
    fit_items = items(rt, examples[:n_train], passages, sentences)
    cases = [c for i, (q, ps, gold) in enumerate(fit_items) for c in sentence_cases(q, ps, gold, i)]
    fitted_on = {"dataset": rt.dataset, "corpus_sha256": rt.index_manifest().get("corpus_sha256"),
                 "questions": len(fit_items), "train_offset": 0, "n_train": n_train, "passages": passages}  # fmt: skip
    selector = fit_selector(cases, fitted_on)
    held = items(rt, examples[n_train:], passages, sentences)
    summary = {
        "fit": {"questions": len(fit_items), "sentences": len(cases), "supporting": sum(c["label"] for c in cases)},
        "held_out": f"train {n_train}:{n_train + n_heldout}",
        "coverage": {
            "top 3 passages whole (the draft today)": coverage(held, None, 0, 3),
            f"top {passages} passages whole": coverage(held, None, 0, passages),
            **{f"{b} sentences of the top {passages}": coverage(held, selector, b, 0) for b in budgets},
        },
        "weights": dict(zip(selector.features, [round(w, 3) for w in selector.weights])),
    }
    return selector, summary


def save_selector(selector: Any, path: Path, passages: int, budget: int) -> Path:
    """The selector as SHARP config keys (a file ``--config`` takes): read sentences, with this selector."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {"evidence": "sentences", "selector": selector.model_dump(mode="json"), "sentence_passages": passages,
              "sentence_budget": budget}  # fmt: skip
    path.write_text(json.dumps(config, indent=1) + "\n")
    return path
