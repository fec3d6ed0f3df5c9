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
    qtype: str = "bridge"
    # a decomposed read: (sub-question, the value read from the title's passage, that title)
    subs: tuple[tuple[str, str, str], ...] = ()
    # the generator is sure of the wrong answer it reads from the first gold passage alone, and the critic
    # supports it
    overconfident: bool = False
    # the critic's reply has no 0-1 confidence: SHARP discards it
    garbled_critic: bool = False
    # the wrong answer read from the first gold passage alone (default: the second gold title, the bridge
    # entity a retrieval repair then searches with the question)
    partial: str = ""

    @property
    def draft(self) -> str:
        return self.partial or self.gold[1]


CASES = [
    Case(
        "What nationality is the director of Pulp Fiction?",
        "American",
        ("Pulp Fiction", "Quentin Tarantino"),
    ),
    Case(
        "Which country is the director of Three Colours Red from?",
        "Poland",
        ("Three Colours Red", "Krzysztof Kieslowski"),
        overconfident=True,
    ),
    Case("Which river flows through the city where the Louvre is?", "Seine", ("Louvre", "Paris")),
    Case(
        "Are Pulp Fiction and Three Colours Red both from 1994?",
        "yes",
        ("Pulp Fiction", "Three Colours Red"),
        qtype="comparison",
        partial="no",
        subs=(
            ("When was Pulp Fiction released?", "1994", "Pulp Fiction"),
            ("When was Three Colours Red released?", "1994", "Three Colours Red"),
        ),
    ),
    Case("Who founded the company that makes the iPhone?", "Steve Jobs", ("iPhone", "Apple Inc.")),
    Case(
        "What is the capital of the country where Krzysztof Kieslowski was born?",
        "Warsaw",
        ("Krzysztof Kieslowski", "Poland"),
    ),
    Case(
        "Which festival awards the prize that Pulp Fiction won?",
        "Cannes Film Festival",
        ("Pulp Fiction", "Cannes Film Festival"),
        overconfident=True,
        partial="Palme d'Or",
    ),
    Case(
        "What language is spoken in the country whose capital is Warsaw?",
        "Polish",
        ("Warsaw", "Poland"),
    ),
    Case(
        "Who co-wrote the screenplay of Pulp Fiction?",
        "Roger Avary",
        ("Pulp Fiction", "Roger Avary"),
        garbled_critic=True,
        partial="Quentin Tarantino",
    ),
    Case(
        "Which director is Polish, Quentin Tarantino or Krzysztof Kieslowski?",
        "Krzysztof Kieslowski",
        ("Quentin Tarantino", "Krzysztof Kieslowski"),
        qtype="comparison",
        partial="Quentin Tarantino",
        subs=(
            ("What nationality is Quentin Tarantino?", "American", "Quentin Tarantino"),
            ("What nationality is Krzysztof Kieslowski?", "Polish", "Krzysztof Kieslowski"),
        ),
    ),
]
# the questions of README.md's "From Python" section, over passages of their own (tests/program/test_load.py
# indexes them beside CORPUS); the rules answer them like the cases above
README_PASSAGES = [
    Passage(
        "r1",
        "Castle Hill (Virginia)",
        "Castle Hill is a plantation near Monticello, the primary residence of Thomas Jefferson, in Virginia.",
    ),
    Passage("r2", "Monticello", "Monticello was the primary plantation of Thomas Jefferson near Charlottesville."),
    Passage("r3", "Gregor Fisher", "Gregor Fisher is a Scottish actor; in 2003 he had a role in Love Actually."),
    Passage("r4", "Love Actually", "Love Actually is a 2003 Christmas-themed romantic comedy film."),
]
README_CASES = [
    Case(
        "Castle Hill is a plantation near what primary residence of Thomas Jefferson?",
        "Monticello",
        ("Castle Hill (Virginia)", "Monticello"),
    ),
    Case(
        "What 2003 Christmas-themed romantic comedy did Gregor Fisher have a role in?",
        "Love Actually",
        ("Gregor Fisher", "Love Actually"),
    ),
]
BY_QUESTION = {c.question: c for c in (*CASES, *README_CASES)}
SUB_QUESTIONS = {sub: (value, title) for c in CASES for sub, value, title in c.subs}

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S)
_TITLE = re.compile(r"^\[\d+\] (.*?): ", re.M)


def fields_of(content: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(content)}


def evidence_titles(evidence: str) -> list[str]:
    return _TITLE.findall(evidence or "")


def render_reply(system: str, values: dict) -> str:
    """The reply in the format the prompt asks for: JSON (JSONAdapter) or ``[[ ## field ## ]]`` sections."""
    if "[[ ## completed ## ]]" in system:
        parts = [f"[[ ## {k} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items()]
        return "\n\n".join([*parts, "[[ ## completed ## ]]"])
    return json.dumps(values)


# the answer tokens' log-probabilities the generator writes with (an LM that returns them: program/reading/confidence.py)
SURE, UNSURE, LOST = [-0.05, -0.1], [-0.9, -1.2], [-2.0]


def plan_rule(f: dict) -> dict:
    """DecomposeQuestion: the case's entities and sub-questions (none for a bridge question)."""
    case = BY_QUESTION.get(f.get("question", ""))
    subs = case.subs if case else ()
    return {"entities": [title for _, _, title in subs], "sub_questions": [sub for sub, _, _ in subs]}


def generator_rule(f: dict) -> dict:
    """GenerateAnswer: the right answer when every gold passage is in the evidence, the case's wrong draft
    when only the first is (sure of it for an overconfident case), else "unknown"; a sub-question's value when
    its passage is there."""
    question, titles = f.get("question", ""), evidence_titles(f.get("evidence", ""))
    if question in SUB_QUESTIONS:
        value, title = SUB_QUESTIONS[question]
        found = title in titles
        return {"answer": value if found else "unknown", "supporting_passages": [1] if found else [],
                "_logprobs": {"answer": SURE if found else LOST}}  # fmt: skip
    case = BY_QUESTION.get(question)
    if case and all(t in titles for t in case.gold):
        return {"answer": case.answer, "supporting_passages": [1], "_logprobs": {"answer": SURE}}
    if case and case.gold[0] in titles:
        lps = SURE if case.overconfident else UNSURE
        return {"answer": case.draft, "supporting_passages": [1], "_logprobs": {"answer": lps}}
    return {"answer": "unknown", "supporting_passages": [], "_logprobs": {"answer": LOST}}


def critic_rule(f: dict) -> dict:
    """CritiqueAnswer: "supported" for the right answer (and for an overconfident case's wrong one),
    "incomplete" when a gold title is missing from the evidence, else "unsupported"; the verdict's token
    probabilities lean the same way."""
    case = BY_QUESTION.get(f.get("question", ""))
    titles = evidence_titles(f.get("evidence", ""))
    draft = f.get("draft_answer", "")
    if case is not None and case.garbled_critic:
        return {"verdict": "supported", "confidence": 250.0}
    missing = [t for t in case.gold if t not in titles] if case else []
    if case is not None and (draft == case.answer or (case.overconfident and draft == case.draft)):
        verdict, probs = "supported", {"supported": 0.9, "unsupported": 0.06, "incomplete": 0.04}
    elif missing:
        verdict, probs = "incomplete", {"supported": 0.15, "unsupported": 0.15, "incomplete": 0.7}
    else:
        verdict, probs = "unsupported", {"supported": 0.25, "unsupported": 0.65, "incomplete": 0.1}
    return {"verdict": verdict, "confidence": probs[verdict], "_logprobs": {"verdict": probs}}


def compose_rule(f: dict) -> dict:
    """ComposeAnswer: the case's answer (the composer is asked only once every sub-question has a value)."""
    case = BY_QUESTION.get(f.get("question", ""))
    return {"answer": case.answer if case else "unknown", "_logprobs": {"answer": [-0.2]}}


# the focused reader (ReadSecondHop) reads as the generator does: the intermediate entity aside
def hop_plan_rule(f: dict) -> dict:
    """PlanHops: no plan (the toy bridges are not chained unless a test scripts a planner)."""
    return {"hops": []}


RULES = {"planner": plan_rule, "critic": critic_rule, "generator": generator_rule, "composer": compose_rule,
         "focuser": generator_rule, "hop_planner": hop_plan_rule}  # fmt: skip


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
