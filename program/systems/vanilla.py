"""Plain single-shot RAG, in the same prediction shape as SHARP: the reference number every system is held to."""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import Field

from program.config import StrictConfig
from program.reading.generation import answer_from_evidence
from program.retrieval.base import Retriever
from program.signatures import GenerateAnswer
from program.systems.common import answered, retrieve
from program.tracing import traced


class VanillaConfig(StrictConfig):
    k: int = Field(5, ge=1, le=50)
    passage_chars: int = Field(600, ge=50, le=5000)
    generator_reasoning: bool = False
    generator_adapter: Literal["chat", "json"] = "json"
    max_question_chars: int = Field(2000, ge=50)


class VanillaRAG(dspy.Module):
    """Retrieve k passages with the question, generate once."""

    SYSTEM = "vanilla"
    CONFIG: type[VanillaConfig] = VanillaConfig  # the config when none is given (a retrieval mode's own: modes.py)

    def __init__(self, retriever: Retriever, config: VanillaConfig | None = None):
        super().__init__()
        self.config = config or self.CONFIG()
        self.retriever = retriever
        self.generator = (dspy.ChainOfThought if self.config.generator_reasoning else dspy.Predict)(GenerateAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        with traced(question, self.config.max_question_chars) as (q, tr):
            evidence = retrieve(self.retriever, q, self.config.k, tr)
            answer, cited = answer_from_evidence(
                self.generator, q, evidence, self.config.passage_chars, tr, adapter=self.config.generator_adapter
            )
        return answered(self.SYSTEM, tr, q, answer, evidence, cited, "single_shot")
