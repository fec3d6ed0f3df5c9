"""Corpora from corpus.jsonl files and from question contexts; dedup and ids."""

from __future__ import annotations

import hashlib
import logging

import pytest

from data.corpus import (
    corpus_from_file,
    iter_corpus,
    load_corpus,
    passage_id,
)
from data.errors import DatasetError
from data.sources import resolve_dataset
from program.types import Passage


def test_load_corpus_joins_sentences_and_keeps_ids(write_json):
    path = write_json(
        [
            {"id": 5, "title": "A", "text": ["First sentence.", " Second  one.\n"]},
            {"id": "x", "title": "B", "text": "Plain string text."},
            {"title": "C", "text": ["No id here."]},
        ],
        "corpus.jsonl",
    )
    passages = load_corpus(path)
    assert passages[0] == Passage("5", "A", "First sentence. Second one.")
    assert passages[1] == Passage("x", "B", "Plain string text.")
    assert passages[2].id == passage_id("C") and passages[2].id.startswith("p")


def test_passage_id_is_stable():
    assert passage_id("Alpha") == passage_id("Alpha") != passage_id("Alpha", "text")
    assert passage_id("Alpha") == "p" + hashlib.sha1(b"Alpha").hexdigest()[:16]


def test_dedup_passage_keeps_same_title_with_other_text(write_json, caplog):
    path = write_json(
        [
            {"id": 0, "title": "A", "text": ["One."]},
            {"id": 1, "title": "A", "text": ["One."]},
            {"id": 2, "title": "A", "text": ["Another paragraph of A."]},
        ],
        "corpus.jsonl",
    )
    with caplog.at_level(logging.INFO, logger="data.corpus"):
        passages = load_corpus(path)
    assert [p.id for p in passages] == ["0", "2"]
    assert "dropped 1 duplicate" in caplog.text and "1 passages share a title" in caplog.text
    assert [p.id for p in load_corpus(path, dedup="title")] == ["0"]


def test_id_less_rows_sharing_a_title_get_distinct_ids(write_json):
    path = write_json([{"title": "A", "text": "one"}, {"title": "A", "text": "two"}], "c.jsonl")
    first, second = load_corpus(path)
    assert first.id == passage_id("A") and second.id == passage_id("A", "two")


def test_same_id_for_different_passages_is_an_error(write_json):
    path = write_json([{"id": 1, "title": "A", "text": "one"}, {"id": 1, "title": "B", "text": "two"}], "c.jsonl")
    with pytest.raises(DatasetError, match="passage id '1'"):
        load_corpus(path)


def test_iter_corpus_streams(write_json):
    path = write_json([{"id": i, "title": f"T{i}", "text": "x"} for i in range(3)], "c.jsonl")
    stream = iter_corpus(path)
    assert next(stream).title == "T0"
    assert len(list(stream)) == 2


@pytest.mark.parametrize(
    "rows_, message",
    [
        ([], "is empty"),
        ([{"id": 1, "title": "A", "text": "  "}], "corpus is empty"),
    ],
)
def test_empty_corpus_is_an_error(write_json, rows_, message):
    path = write_json(rows_, "c.jsonl")
    with pytest.raises(DatasetError, match=message):
        load_corpus(path)


@pytest.mark.parametrize(
    "row, field", [({"id": 1, "text": "x"}, "title"), ({"id": 1, "title": "A", "text": 3}, "text")]
)
def test_bad_corpus_row_names_line_and_field(write_json, row, field):
    path = write_json([{"id": 0, "title": "ok", "text": "fine"}, row], "c.jsonl")
    with pytest.raises(DatasetError) as err:
        load_corpus(path)
    assert str(path) in str(err.value) and "line 2" in str(err.value) and f"'{field}'" in str(err.value)


def test_corpus_from_hotpot_contexts(rows, write_json):
    passages = corpus_from_file(write_json(rows["hotpot"], "hotpot.json"))
    assert [p.title for p in passages] == ["Alpha", "Beta", "Gamma", "Delta"]
    assert passages[0].text == "Alpha is a film. It was directed by Ann."  # row 2's split merges into row 1's
    assert passages[2].text == "Gamma is a film."
    assert passages[0].id == passage_id("Alpha")


def test_corpus_from_2wiki_and_hf_and_musique(rows, to_hf_columns, write_json):
    assert [p.title for p in corpus_from_file(write_json(rows["twowiki"], "twowiki.json"))] == ["Kim", "Lee"]
    cols = to_hf_columns(rows["hotpot"])
    hf_rows = [{k: cols[k][i] for k in cols} for i in range(len(rows["hotpot"]))]
    assert [p.title for p in corpus_from_file(write_json(hf_rows, "hf.json"))] == ["Alpha", "Beta", "Gamma", "Delta"]
    path = write_json(rows["musique"], "musique.json")
    musique = corpus_from_file(path)
    assert [p.title for p in musique] == ["Noise", "Second", "First", "First"]
    assert len({p.id for p in musique}) == 4
    assert [p.title for p in corpus_from_file(path, dedup="title")] == ["Noise", "Second", "First"]


def test_corpus_from_rows_without_context_is_an_error(rows, write_json):
    with pytest.raises(DatasetError, match="corpus is empty"):
        corpus_from_file(write_json(rows["open"], "open.json"))


def test_corpus_from_file_names_bad_row(rows, write_json):
    bad = rows["hotpot"][:1] + [{**rows["hotpot"][1], "context": [["Only a title"]]}]
    path = write_json(bad, "q.json")
    with pytest.raises(DatasetError) as err:
        corpus_from_file(path)
    assert str(path) in str(err.value) and "row 2" in str(err.value) and "'context'" in str(err.value)


def test_corpus_path(data_dir, tmp_path):
    assert resolve_dataset("hotpotqa", data_dir).corpus_file() == data_dir / "hotpotqa" / "corpus.jsonl"
    with pytest.raises(DatasetError) as err:
        resolve_dataset("musique", data_dir).corpus_file()
    assert "musique/corpus.jsonl" in str(err.value) and "SHARP_DATA" in str(err.value)
