"""The shared datasets load with zero errors (skipped where they are not present)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from data.corpus import load_corpus
from data.loaders import load_examples_report
from data.sources import resolve_dataset

REAL = Path(os.environ.get("SHARP_DATA") or Path(__file__).resolve().parents[3] / "shared" / "datasets")
COUNTS = {
    ("hotpotqa", "train"): 598,
    ("hotpotqa", "dev"): 666,
    ("2wikimultihopqa", "train"): 464,
    ("2wikimultihopqa", "dev"): 826,
    ("musique", "train"): 100,
    ("musique", "dev"): 100,
}
CORPUS_SIZES = {"hotpotqa": 22826, "2wikimultihopqa": 8651, "musique": 3722}

pytestmark = pytest.mark.skipif(
    not (REAL / "hotpotqa" / "dev.json").is_file(), reason=f"shared datasets not found at {REAL}"
)


@pytest.mark.parametrize("dataset, split", sorted(COUNTS))
def test_real_question_files_load_without_errors(dataset, split):
    examples, report = load_examples_report(dataset, split, REAL)
    assert len(examples) == COUNTS[dataset, split]
    assert report.skipped == 0 and report.unanswerable == 0
    assert all(ex.gold_titles for ex in examples) and all(ex.dataset == dataset for ex in examples)


def test_real_hotpotqa_has_null_types_and_sentence_ids():
    examples, _ = load_examples_report("hotpotqa", "dev", REAL)
    assert Counter(ex.type for ex in examples)[None] == 184
    assert any(s is None for ex in examples for _, s in ex.gold_sentences)


@pytest.mark.parametrize("dataset", sorted(CORPUS_SIZES))
def test_real_corpora_hold_every_gold_title(dataset):
    passages = load_corpus(resolve_dataset(dataset, REAL).corpus_file())
    assert len(passages) == CORPUS_SIZES[dataset]
    titles = {p.title for p in passages}
    for split in ("train", "dev"):
        examples, _ = load_examples_report(dataset, split, REAL)
        assert all(t in titles for ex in examples for t in ex.gold_titles)
