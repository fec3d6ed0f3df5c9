"""`sharp ask`'s trace at 80 columns (a common terminal): every step a row, no line wider than the terminal,
the detail given the width the other columns leave, and a column blank on every row left out."""

from __future__ import annotations

import io
import re

import pytest
from doubles import FieldLM, KeywordRetriever, assign
from rich.console import Console

from experiments.console import render
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig

# a comparison whose draft and retrieval repair are unsure and whose decomposed read is sure: three rounds,
# seven LM calls with the critic (four without)
CHOICE = "Which film director, Quentin Tarantino or Krzysztof Kieslowski, was born in Poland, a country in Europe?"
SUBS = ["Where was Quentin Tarantino born?", "Where was Krzysztof Kieslowski born?"]
ROW = re.compile(r"^ ?(\d+) +(\w+)")  # a table row's first line: the step's number and role (not a wrapped line)


def run(critic: str):
    prog = SharpRAG(KeywordRetriever(), SharpConfig(ask_critic=critic, repair_comparison=("retrieve", "compare")))
    values = {SUBS[0]: "Knoxville, Tennessee", SUBS[1]: "Warsaw, Poland"}

    def generator(fields):
        answer, lp = (values[fields["question"]], -0.05) if fields["question"] in values else ("Tarantino", -2.0)
        return {"answer": answer, "supporting_passages": [1], "_logprobs": {"answer": [lp]}}

    def critic(fields):  # unsure of "Tarantino", sure of the composed answer
        right = fields["draft_answer"] == "Krzysztof Kieslowski"
        probs = {"supported": 0.9, "unsupported": 0.1} if right else {"supported": 0.3, "unsupported": 0.7}
        verdict = "supported" if right else "unsupported"
        return {"verdict": verdict, "confidence": probs[verdict], "_logprobs": {"verdict": probs}}

    assign(
        prog,
        {
            "planner": FieldLM("planner", lambda f: {"entities": [], "sub_questions": SUBS}),
            "critic": FieldLM("critic", critic),
            "generator": FieldLM("generator", generator),
            "composer": FieldLM(
                "composer", lambda f: {"answer": "Krzysztof Kieslowski", "_logprobs": {"answer": [-0.1]}}
            ),
        },
    )
    return prog(question=CHOICE)


def shown(pred, width: int = 80) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    console.print(render._trace_table(pred.trace))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("critic", ["off", "always"])
def test_the_trace_reads_at_80_columns_with_every_step(critic):
    pred = run(critic)
    rounds = [s["action"] for s in pred.trace if s["role"] == "judgement"]
    assert rounds == ["draft", "retrieve", "compare"] and pred.answer == "Krzysztof Kieslowski"
    lines = shown(pred)
    assert max(len(line) for line in lines) <= 80
    rows = [m.groups() for m in map(ROW.match, lines) if m]
    assert rows == [(str(s["step"]), s["role"]) for s in pred.trace]  # every step, once, in order
    # the detail has the width the others leave: the draft's search (the whole question, 104 characters) takes
    # three lines, five beside the critic's verdict column (one word a line before)
    starts = [i for i, line in enumerate(lines) if ROW.match(line)]
    assert starts[1] - starts[0] <= (3 if critic == "off" else 5), "\n".join(lines)
    assert "Knoxville, Tennessee" in "\n".join(lines) and SUBS[1] in " ".join(" ".join(lines).split())


def test_a_column_blank_on_every_row_is_left_out():
    header = next(line for line in shown(run("off")) if line.split()[:2] == ["#", "role"])
    assert header.split() == ["#", "role", "k", "detail", "P", "calls", "tok", "s"]  # no critic: no verdict
    with_critic = shown(run("always"))
    header = next(line for line in with_critic if line.split()[:2] == ["#", "role"])
    assert "verdict" in header.split()
    critic_row = next(line for line in with_critic if ROW.match(line) and ROW.match(line).group(2) == "critic")
    assert "unsupported" in critic_row and "0.30" in critic_row  # its P(supported)
