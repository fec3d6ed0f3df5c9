"""The toy multi-hop world shared by the compile/tune/export tests and the live-server tests: a corpus,
questions with gold titles, and rules that answer each role's prompt as a deterministic function of
its input fields (so a replay, a reloaded program, an exported model and a program served in another
process see exactly what a live run sees, in any call order)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from program.types import Passage

CORPUS = [
    Passage("p1", "Pulp Fiction", "Pulp Fiction is a 1994 film directed by Quentin Tarantino. It won the Palme d'Or."),
    Passage("p2", "Quentin Tarantino", "Quentin Tarantino is an American film director and screenwriter."),
    Passage("p3", "Three Colours Red", "Three Colours Red is a 1994 film by Krzysztof Kieslowski."),
    Passage("p4", "Krzysztof Kieslowski", "Krzysztof Kieslowski was a Polish film director born in Warsaw, Poland."),
    Passage("p5", "Cannes Film Festival", "The Palme d'Or is the highest prize of the Cannes Film Festival."),
    Passage("p6", "Paris", "Paris is the capital of France; the Seine flows through it."),
    Passage("p7", "Louvre", "The Louvre is a museum in Paris."),
    Passage("p8", "Poland", "Poland is a country whose capital is Warsaw; Polish is spoken there."),
    Passage("p9", "Warsaw", "Warsaw is the capital of Poland."),
    Passage("p10", "iPhone", "The iPhone is a smartphone made by Apple Inc."),
    Passage("p11", "Apple Inc.", "Apple Inc. was founded by Steve Jobs, Steve Wozniak and Ronald Wayne."),
    Passage("p12", "Film", "A film is a work of visual art. Many films win prizes at festivals."),
]


@dataclass(frozen=True)
class Case:
    question: str
    answer: str
    gold: tuple[str, str]
    plan: tuple[str, ...]
    qtype: str = "bridge"
    # the critic wrongly says "sufficient" (confidence 0.6) when only the first gold title is present
    overconfident: bool = False
    # the critic's suggestion changes every round (and finds nothing new: the gold is not in the corpus)
    rotating: bool = False


CASES = [
    Case(
        "What nationality is the director of Pulp Fiction?",
        "American",
        ("Pulp Fiction", "Quentin Tarantino"),
        ("Pulp Fiction director",),
    ),
    Case(
        "Which country is the director of Three Colours Red from?",
        "Poland",
        ("Three Colours Red", "Krzysztof Kieslowski"),
        ("Three Colours Red film",),
        overconfident=True,
    ),
    Case("Which river flows through the city where the Louvre is?", "Seine", ("Louvre", "Paris"), ("Louvre museum",)),
    Case(
        "Are Pulp Fiction and Three Colours Red both from 1994?",
        "yes",
        ("Pulp Fiction", "Three Colours Red"),
        ("Pulp Fiction", "Three Colours Red"),
        qtype="comparison",
    ),
    Case("Who founded the company that makes the iPhone?", "Steve Jobs", ("iPhone", "Apple Inc."), ("iPhone maker",)),
    Case(
        "What is the capital of the country where Krzysztof Kieslowski was born?",
        "Warsaw",
        ("Krzysztof Kieslowski", "Poland"),
        ("Krzysztof Kieslowski birthplace",),
    ),
    Case(
        "Which festival awards the prize that Pulp Fiction won?",
        "Cannes Film Festival",
        ("Pulp Fiction", "Cannes Film Festival"),
        ("Pulp Fiction prize",),
        overconfident=True,
    ),
    Case(
        "What language is spoken in the country whose capital is Warsaw?",
        "Polish",
        ("Warsaw", "Poland"),
        ("capital Warsaw",),
    ),
    Case(
        "Who co-wrote the screenplay of Pulp Fiction?",
        "Roger Avary",
        ("Pulp Fiction", "Roger Avary"),
        ("Pulp Fiction screenplay",),
        rotating=True,
    ),
]
BY_QUESTION = {c.question: c for c in CASES}

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S)
_TITLE = re.compile(r"^\[\d+\] (.*?): ", re.M)


def fields_of(content: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(content)}


def evidence_titles(evidence: str) -> list[str]:
    return _TITLE.findall(evidence or "")


def plan_rule(f: dict) -> dict:
    case = BY_QUESTION.get(f.get("question", ""))
    return {"sub_queries": list(case.plan) if case else []}


def critic_rule(f: dict) -> dict:
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    if case is None:
        return {"verdict": "insufficient", "confidence": 0.5, "missing_information": [], "suggested_queries": []}
    missing = [t for t in case.gold if t not in titles]
    n = len(titles)
    if not missing:
        return {
            "verdict": "sufficient",
            "confidence": 0.9 if n <= 3 else 0.75,
            "missing_information": [],
            "suggested_queries": [],
        }
    if case.overconfident and len(missing) == 1:
        return {"verdict": "sufficient", "confidence": 0.6, "missing_information": [], "suggested_queries": []}
    query = f"{missing[0]} facts" + (f" {n}" if case.rotating else "")
    return {
        "verdict": "insufficient",
        "confidence": 0.8 if n % 2 else 0.65,
        "missing_information": [f"facts about {missing[0]}"],
        "suggested_queries": [query],
    }


def bridge_rule(f: dict) -> dict:
    """The next query from the evidence: the first missing gold title (or a repeat when none is)."""
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    missing = [t for t in case.gold if t not in titles] if case else []
    return {"entity": f"{missing[0]} bridge" if missing else f.get("question", "")}


def generator_rule(f: dict) -> dict:
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    if case and all(t in titles for t in case.gold):
        return {"answer": case.answer, "supporting_passages": [1]}
    if case and case.gold[0] in titles:
        return {"answer": "the " + case.gold[0], "supporting_passages": [1]}
    return {"answer": "unknown", "supporting_passages": []}


RULES = {"planner": plan_rule, "critic": critic_rule, "bridge": bridge_rule, "generator": generator_rule}


def hotpot_rows(cases=CASES) -> list[dict]:
    """The cases as HotpotQA records (gold titles as supporting facts)."""
    text = {p.title: p.text for p in CORPUS}
    return [
        {
            "_id": f"q{i}",
            "question": c.question,
            "answer": c.answer,
            "type": c.qtype,
            "level": "hard",
            "supporting_facts": [[t, 0] for t in c.gold],
            "context": [[t, [text.get(t, t + ".")]] for t in c.gold],
        }
        for i, c in enumerate(cases)
    ]


def write_dataset(data_dir: Path, name: str = "hotpotqa") -> Path:
    """DATA_DIR/NAME/{train,dev}.json and corpus.jsonl: the toy world as a dataset `sharp` reads by name."""
    folder = Path(data_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    rows = hotpot_rows()
    (folder / "train.json").write_text(json.dumps(rows))
    (folder / "dev.json").write_text(json.dumps(rows))
    with open(folder / "corpus.jsonl", "w") as fh:
        for p in CORPUS:
            fh.write(json.dumps({"id": p.id, "title": p.title, "text": [p.text]}) + "\n")
    return folder
