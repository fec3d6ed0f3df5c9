"""What recording the train rounds will cost, said before it starts, and the guard that stops it.

A *probe* records the first few questions left (they stay in the recording: no call is made twice) and
measures them: LM calls, prompt and completion tokens, seconds, and whether the reader wrote token
log-probabilities. :class:`Estimate` scales the probe to the questions left: calls, tokens, the time at the
measured speed, and the money where the model is priced (LiteLLM's cost map, read offline:
``LITELLM_LOCAL_MODEL_COST_MAP=True``; a model embedded here costs nothing but time). :class:`CostGuard`
adds what each question spent and stops the recording once ``--max-cost`` is reached: what was recorded
is kept, and the same command resumes after it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.console.terminal import duration
from program.errors import ConfigError, SharpError

log = logging.getLogger(__name__)

# questions the probe records before the estimate (at least one per thread)
PROBE_QUESTIONS = 3


class CostLimitError(SharpError):
    """The recording reached --max-cost: stopped, what it recorded kept."""


@dataclass(frozen=True)
class Price:
    """Dollars per prompt and per completion token of one model; ``known`` False where the cost map has no
    price for it (then money is not estimated, and --max-cost is refused)."""

    model: str
    prompt: float = 0.0
    completion: float = 0.0
    known: bool = True
    local: bool = False

    def dollars(self, prompt_tokens: float, completion_tokens: float) -> float | None:
        if not self.known:
            return None
        return self.prompt * prompt_tokens + self.completion * completion_tokens

    def describe(self) -> str:
        if self.local:
            return f"{self.model} runs on this machine: no money, only time"
        if not self.known:
            return f"{self.model} has no price in LiteLLM's cost map: money not estimated"
        return (
            f"{self.model}: ${self.prompt * 1e6:.3g} per million prompt tokens, ${self.completion * 1e6:.3g} completion"
        )


# LiteLLM's cost map as its package ships it (what LiteLLM reads with LITELLM_LOCAL_MODEL_COST_MAP=True)
COST_MAP = "model_prices_and_context_window_backup.json"


@functools.cache
def cost_map() -> dict[str, Any]:
    """LiteLLM's cost map, read from its package without importing LiteLLM (seconds a process); {} where absent."""
    spec = importlib.util.find_spec("litellm")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / COST_MAP
        if path.is_file():
            return json.loads(path.read_text())
    return {}


def price_of(model: str) -> Price:
    """The price of ``model`` (a LiteLLM model string, or ``local/NAME``) in LiteLLM's cost map: its entry under
    the whole string, else under the name of a model of that provider (``openai/gpt-4o-mini``: ``gpt-4o-mini``)."""
    if model.startswith("local/"):
        return Price(model, local=True)
    provider, _, name = model.partition("/")
    entries = cost_map()
    found = entries.get(model)
    if found is None and (entries.get(name) or {}).get("litellm_provider") == provider:
        found = entries[name]
    prompt, completion = (found or {}).get("input_cost_per_token"), (found or {}).get("output_cost_per_token")
    if prompt is None or completion is None:
        return Price(model, known=False)
    return Price(model, float(prompt), float(completion))


def check_max_cost(max_cost: float | None, price: Price) -> None:
    """Refuse --max-cost where the model's price is unknown: the guard could never fire."""
    if max_cost is None:
        return
    if max_cost <= 0:
        raise ConfigError(f"--max-cost must be more than 0 dollars, got {max_cost:g}")
    if not price.known:
        raise ConfigError(
            f"--max-cost: LiteLLM's cost map has no price for {price.model}, so what it spends cannot be counted; "
            "leave --max-cost out (and bound the build with --limit), or use a priced model"
        )


@dataclass
class Spent:
    """What questions spent: their count, LM calls, the tokens of the calls not answered from DSPy's cache (the
    ones paid for), seconds."""

    questions: int = 0
    lm_calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    failed: int = 0
    logprobs: int = 0  # questions whose draft was read with token log-probabilities

    def add(self, rec: Mapping[str, Any], calls: Mapping[str, Any]) -> None:
        self.questions += 1
        n, cached = int(calls.get("lm_calls") or 0), int(calls.get("cached_calls") or 0)
        paid = (n - cached) / n if n else 0.0  # a call answered from the cache costs nothing
        self.lm_calls += n
        self.cached_calls += cached
        self.prompt_tokens += round(int(calls.get("prompt_tokens") or 0) * paid)
        self.completion_tokens += round(int(calls.get("completion_tokens") or 0) * paid)
        self.seconds += float(rec.get("seconds") or 0.0)
        self.failed += int(bool(rec.get("error")))
        self.logprobs += int(read_with_logprobs(rec))

    def dollars(self, price: Price) -> float | None:
        return price.dollars(self.prompt_tokens, self.completion_tokens)


def read_with_logprobs(rec: Mapping[str, Any]) -> bool:
    """Whether a recorded question's reads carry token log-probabilities (a draft's answer confidence)."""
    return any(((r.get("read") or {}).get("confidence") is not None) for r in rec.get("rounds") or [])


def logprobs_in(records: Iterable[Mapping[str, Any]]) -> bool | None:
    """Whether the reader wrote token log-probabilities in these records: None where none read anything."""
    read = [r for r in records if not r.get("error") and r.get("rounds")]
    return any(read_with_logprobs(r) for r in read) if read else None


@dataclass(frozen=True)
class Estimate:
    """The questions left, scaled from a probe: LM calls, tokens, time, money (None: not priced)."""

    questions: int
    lm_calls: float
    prompt_tokens: float
    completion_tokens: float
    seconds: float
    dollars: float | None
    probe: Spent
    price: Price
    threads: int = 1

    @classmethod
    def scale(cls, probe: Spent, wall_seconds: float, left: int, price: Price, threads: int = 1) -> Estimate:
        """``left`` questions at the probe's means; the time at the probe's measured wall time a question
        (which ran on ``threads``)."""
        n = max(probe.questions, 1)
        prompt, completion = probe.prompt_tokens / n * left, probe.completion_tokens / n * left
        return cls(
            questions=left,
            lm_calls=probe.lm_calls / n * left,
            prompt_tokens=prompt,
            completion_tokens=completion,
            seconds=wall_seconds / n * left,
            dollars=price.dollars(prompt, completion),
            probe=probe,
            price=price,
            threads=threads,
        )

    def lines(self) -> list[str]:
        """What the estimate says, one line each."""
        p = self.probe
        out = [
            f"probe: {p.questions} questions recorded, {p.lm_calls} LM calls ({p.lm_calls / max(p.questions, 1):.1f} "
            f"a question), {p.prompt_tokens + p.completion_tokens} tokens, {duration(p.seconds)}"
            + (f"; {p.cached_calls} calls came from the cache (the estimate is low)" if p.cached_calls else ""),
            f"to record: {self.questions} questions, about {self.lm_calls:.0f} LM calls and "
            f"{self.prompt_tokens + self.completion_tokens:,.0f} tokens ({self.prompt_tokens:,.0f} prompt, "
            f"{self.completion_tokens:,.0f} completion), about {duration(self.seconds)} at the measured speed"
            + (f" on {self.threads} threads" if self.threads > 1 else ""),
        ]
        if self.price.local:
            out.append(f"money: none ({self.price.describe()})")
        elif self.dollars is None:
            out.append(f"money: not estimated ({self.price.describe()})")
        else:
            out.append(f"money: about ${self.dollars:.4f} ({self.price.describe()})")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "lm_calls": round(self.lm_calls, 1),
            "prompt_tokens": round(self.prompt_tokens),
            "completion_tokens": round(self.completion_tokens),
            "seconds": round(self.seconds, 1),
            "dollars": None if self.dollars is None else round(self.dollars, 6),
            "probe_questions": self.probe.questions,
            "probe_cached_calls": self.probe.cached_calls,
            "threads": self.threads,
        }


@dataclass
class CostGuard:
    """Counts what the recording spends; past ``max_cost`` dollars (None: no limit) it stops it."""

    price: Price
    max_cost: float | None = None
    spent: Spent = field(default_factory=Spent)
    where: str = "the recording"
    command: str = "the same command"

    def add(self, rec: Mapping[str, Any], calls: Mapping[str, Any]) -> None:
        self.spent.add(rec, calls)
        dollars = self.spent.dollars(self.price)
        if self.max_cost is not None and dollars is not None and dollars >= self.max_cost:
            raise CostLimitError(
                f"stopped by --max-cost ${self.max_cost:g}: ${dollars:.4f} spent on {self.spent.questions} questions "
                f"({self.spent.lm_calls} LM calls). They are kept in {self.where}; rerun {self.command} to go on "
                "(each run spends at most --max-cost)"
            )
