"""A 20-passage corpus and a deterministic, model-free embedder for retrieval tests."""

from __future__ import annotations

import os

import pytest
from hash_embedder import HashEmbedder, HashEmbedderFactory  # (numpy only: a child process imports this file)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from program.types import Passage

TINY = [
    (
        "Eiffel Tower",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, designed by Gustave Eiffel's company.",
    ),
    ("Gustave Eiffel", "Gustave Eiffel was a French civil engineer born in Dijon in 1832."),
    ("Dijon", "Dijon is a city in eastern France, capital of the Cote-d'Or department, famous for its mustard."),
    ("Great Wall of China", "The Great Wall of China is a series of fortifications built across northern China."),
    ("Python (programming language)", "Python is a high-level programming language created by Guido van Rossum."),
    ("Guido van Rossum", "Guido van Rossum is a Dutch programmer, born in Haarlem, the creator of Python."),
    ("Haarlem", "Haarlem is a city in the Netherlands and the capital of the province of North Holland."),
    ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    ("Edmund Hillary", "Edmund Hillary was a New Zealand mountaineer who first climbed Mount Everest in 1953."),
    ("Photosynthesis", "Photosynthesis is the process plants use to convert light energy into chemical energy."),
    ("Chlorophyll", "Chlorophyll is the green pigment in plants that absorbs light for photosynthesis."),
    ("Pokémon", "Pokémon is a media franchise created by Satoshi Tajiri, managed by The Pokémon Company."),
    ("Satoshi Tajiri", "Satoshi Tajiri is a Japanese video game designer, the creator of the Pokémon franchise."),
    ("Beethoven", "Ludwig van Beethoven was a German composer and pianist born in Bonn."),
    ("Bonn", "Bonn is a city on the banks of the Rhine in Germany, former capital of West Germany."),
    ("Amazon River", "The Amazon River in South America is the largest river by discharge volume of water."),
    ("Marie Curie", "Marie Curie was a Polish physicist and chemist who researched radioactivity."),
    ("Radioactivity", "Radioactivity is the process by which an unstable atomic nucleus loses energy by radiation."),
    ("Tour de France", "The Tour de France is an annual men's multiple-stage bicycle race held mainly in France."),
    ("Bicycle", "A bicycle is a human-powered, pedal-driven, single-track vehicle with two wheels."),
]


def tiny_passages() -> list[Passage]:
    return [Passage(id=f"t{i:02d}", title=t, text=x) for i, (t, x) in enumerate(TINY)]


PERSISTED = 1100  # passages: above Chroma's sync_threshold (1000), so the build persists its HNSW files


def many_passages(n: int = PERSISTED) -> list[Passage]:
    """The tiny corpus and filler passages up to ``n``: enough for Chroma to persist its HNSW segment
    (index_metadata.pickle and checksummed HNSW files; a smaller store has only scratch HNSW files,
    program/retrieval/integrity.py). The filler shares no word with the tiny corpus's queries."""
    filler = [
        Passage(id=f"f{i:04d}", title=f"Filler {i}", text=f"Filler record {i} of series {i % 37} in batch {i % 11}.")
        for i in range(n - len(TINY))
    ]
    return tiny_passages() + filler


@pytest.fixture
def passages() -> list[Passage]:
    return tiny_passages()


@pytest.fixture
def persisted_passages() -> list[Passage]:
    return many_passages()


@pytest.fixture
def fake_embedder() -> HashEmbedder:
    return HashEmbedder()


QUESTIONS = [
    ("q1", "Where was the designer of the Eiffel Tower born?", "Dijon", "bridge", ["Eiffel Tower", "Gustave Eiffel"]),
    (
        "q2",
        "Who created the programming language Python?",
        "Guido van Rossum",
        "bridge",
        ["Python (programming language)"],
    ),
    (
        "q3",
        "Which composer was born in the city that was capital of West Germany?",
        "Beethoven",
        "comparison",
        ["Beethoven", "Bonn"],
    ),
    (
        "q4",
        "Who first climbed the highest mountain on Earth?",
        "Edmund Hillary",
        "bridge",
        ["Mount Everest", "Edmund Hillary"],
    ),
]


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """A folder with corpus.jsonl (id, title, text sentences) and a HotpotQA-format dev.json."""
    return _write_dataset(tmp_path_factory.mktemp("data") / "tiny", tiny_passages())


@pytest.fixture(scope="session")
def large_dataset(tmp_path_factory):
    """As tiny_dataset, with filler passages up to PERSISTED (Chroma persists its HNSW files)."""
    return _write_dataset(tmp_path_factory.mktemp("data") / "large", many_passages())


def _write_dataset(folder, passages):
    import json

    folder.mkdir()
    with open(folder / "corpus.jsonl", "w") as f:
        for p in passages:
            f.write(json.dumps({"id": p.id, "title": p.title, "text": [p.text]}) + "\n")
    by_title = {t: x for t, x in TINY}
    rows = [
        {
            "_id": qid,
            "question": q,
            "answer": a,
            "type": typ,
            "level": "hard",
            "supporting_facts": [[t, 0] for t in gold],
            "context": [[t, [by_title[t]]] for t in gold],
        }
        for qid, q, a, typ, gold in QUESTIONS
    ]
    (folder / "dev.json").write_text(json.dumps(rows))
    return folder


@pytest.fixture
def fake_models(monkeypatch):
    """The CLI's embedding model replaced by HashEmbedder (64-d, no model files), for `sharp index`,
    `sharp retrieve`, `sharp eval`: returns the list of embedders made (empty: no model was loaded)."""
    from rich.console import Console

    import data.indexing
    import program.retrieval.factory as factory
    from experiments.console import terminal

    made: list[HashEmbedder] = []
    monkeypatch.setattr(HashEmbedderFactory, "made", made)
    monkeypatch.setattr(data.indexing, "Embedder", HashEmbedderFactory)
    monkeypatch.setattr(factory, "shared_embedder", lambda config: HashEmbedderFactory.from_config(config))
    # error messages on one line, so a suggested command can be read back whole
    monkeypatch.setattr(terminal, "err_console", Console(stderr=True, width=100_000))
    return made


@pytest.fixture
def scripted_lms(monkeypatch):
    """Every LM of every system the CLI builds answers from a script ("Paris", citing passage 1)."""
    import itertools

    from doubles import ScriptedLM, assign

    from experiments import runtime

    def give(module, lm_config):
        lms = {}
        for role in ("planner", "critic", "generator"):
            lms[role] = ScriptedLM(role, [])
        lms["planner"].answers = itertools.repeat({"sub_queries": ["Eiffel Tower designer"]})
        lms["critic"].answers = itertools.repeat({"verdict": "sufficient", "confidence": 0.9})
        lms["generator"].answers = itertools.repeat({"answer": "Dijon", "supporting_passages": [1]})
        assign(module, lms)

    monkeypatch.setattr(runtime, "assign_lms", give)
