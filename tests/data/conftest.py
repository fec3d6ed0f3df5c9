"""Small fixture rows in every supported layout, and helpers writing them to tmp_path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def hotpot_rows() -> list[dict[str, Any]]:
    return [
        {
            "_id": "h1",
            "question": "Which film did the director of Alpha make?",
            "answer": "Beta",
            "type": "bridge",
            "level": "hard",
            "supporting_facts": [["Alpha", 0], ["Beta", 1], ["Alpha", 1]],
            "context": [
                ["Alpha", ["Alpha is a film.", " It was directed by Ann."]],
                ["Beta", ["Beta is a film.", " Ann made it."]],
            ],
        },
        {  # IRCoT-style row: type null, sentence ids unknown
            "_id": "h2",
            "question": "Are Alpha and Gamma both films?",
            "answer": "yes",
            "type": None,
            "level": "hard",
            "supporting_facts": [["Alpha", None], ["Gamma", None]],
            "context": [["Alpha", ["Alpha is a film.", "It was directed by Ann."]], ["Gamma", ["Gamma is a  film."]]],
        },
        {
            "_id": "h3",
            "question": "Is Delta older than Beta?",
            "answer": "no",
            "type": "comparison",
            "level": "medium",
            "supporting_facts": [["Delta", 0], ["Beta", 0]],
            "context": [["Delta", ["Delta is a film from 1990."]], ["Beta", ["Beta is a film.", " Ann made it."]]],
        },
    ]


def hf_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The Hugging Face column layout of official HotpotQA rows (sent ids must be ints)."""
    return {
        "id": [r["_id"] for r in rows],
        "question": [r["question"] for r in rows],
        "answer": [r["answer"] for r in rows],
        "type": [r["type"] for r in rows],
        "level": [r["level"] for r in rows],
        "supporting_facts": [
            {"title": [t for t, _ in r["supporting_facts"]], "sent_id": [s or 0 for _, s in r["supporting_facts"]]}
            for r in rows
        ],
        "context": [{"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]} for r in rows],
    }


def twowiki_rows() -> list[dict[str, Any]]:
    return [
        {
            "_id": "w1",
            "type": "compositional",
            "question": "Where was the father of Kim buried?",
            "answer": "Cork",
            "supporting_facts": [["Kim", 2], ["Lee", 1]],
            "evidences": [["Kim", "father", "Lee"], ["Lee", "place of burial", "Cork"]],
            "context": [
                ["Kim", ["Kim was born.", "Kim sang.", "Kim's father was Lee."]],
                ["Lee", ["Lee lived.", "Lee is buried in Cork."]],
            ],
        },
        {
            "_id": "w2",
            "type": "comparison",
            "question": "Who was born first, Kim or Lee?",
            "answer": "Lee",
            "supporting_facts": [["Kim", 0], ["Lee", 0]],
            "evidences": [],
            "context": [["Kim", ["Kim was born.", "Kim sang.", "Kim's father was Lee."]]],
        },
    ]


def twowiki_open_rows() -> list[dict[str, Any]]:
    return [
        {
            "_id": "o1",
            "question": "Where did the singer of Song die?",
            "answer": "Detroit",
            "answer_aliases": ["Detroit, Michigan", "Detroit", "Motor City"],
            "supporting_facts": [["Aretha", None], ["Song", None]],
        },
        {
            "_id": "o2",
            "question": "Who wrote Book?",
            "answer": "Ann",
            "answer_aliases": [],
            "supporting_facts": [["Book", None]],
        },
    ]


def musique_rows() -> list[dict[str, Any]]:
    paragraphs = [
        {"idx": 0, "title": "Noise", "paragraph_text": "Noise paragraph.", "is_supporting": False},
        {"idx": 1, "title": "Second", "paragraph_text": "Second hop text.", "is_supporting": True},
        {"idx": 2, "title": "First", "paragraph_text": "First hop text.", "is_supporting": True},
        {"idx": 3, "title": "First", "paragraph_text": "Another paragraph of First.", "is_supporting": False},
    ]
    decomposition = [
        {"id": 1, "question": "q1", "answer": "a1", "paragraph_support_idx": 2},
        {"id": 2, "question": "#1 q2", "answer": "a2", "paragraph_support_idx": 1},
    ]
    return [
        {
            "id": "2hop__1_2",
            "question": "What is the second hop of the first?",
            "answer": "a2",
            "answer_aliases": ["A2"],
            "paragraphs": paragraphs,
            "question_decomposition": decomposition,
            "answerable": True,
        },
        {
            "id": "3hop1__1_2_3",
            "question": "A three-hop question?",
            "answer": "x",
            "answer_aliases": [],
            "paragraphs": paragraphs,
            "question_decomposition": decomposition,
            "answerable": True,
        },
        {
            "id": "2hop__9_9",
            "question": "An unanswerable question?",
            "answer": "y",
            "answer_aliases": [],
            "paragraphs": paragraphs[:1],
            "question_decomposition": [],
            "answerable": False,
        },
    ]


@pytest.fixture
def write_json(tmp_path: Path) -> Callable[..., Path]:
    """write_json(rows, name) -> path: a JSON array file, or JSON Lines when name ends in .jsonl."""

    def write(rows: list[Any], name: str = "rows.json") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".jsonl"):
            path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        else:
            path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        return path

    return write


@pytest.fixture
def data_dir(tmp_path: Path, write_json: Callable[..., Path]) -> Path:
    """A datasets folder laid out like /work/shared/datasets, with tiny files."""
    write_json(hotpot_rows(), "datasets/hotpotqa/dev.json")
    write_json(hotpot_rows()[:2], "datasets/hotpotqa/train.jsonl")
    write_json(twowiki_rows(), "datasets/2wikimultihopqa/train.json")
    write_json(twowiki_open_rows(), "datasets/2wikimultihopqa/dev.json")
    write_json(musique_rows(), "datasets/musique/dev.json")
    corpus = [{"id": 0, "title": "Alpha", "text": ["Alpha is a film.", " It was directed by Ann."]}]
    write_json(corpus, "datasets/hotpotqa/corpus.jsonl")
    return tmp_path / "datasets"


@pytest.fixture
def rows() -> dict[str, list[dict[str, Any]]]:
    """Fresh raw rows by layout: hotpot, twowiki, open (2Wiki open-retrieval), musique."""
    return {"hotpot": hotpot_rows(), "twowiki": twowiki_rows(), "open": twowiki_open_rows(), "musique": musique_rows()}


@pytest.fixture
def to_hf_columns() -> Callable[[list[dict[str, Any]]], dict[str, list[Any]]]:
    return hf_columns
