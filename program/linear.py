"""A fitted logistic regression kept as plain numbers: the critic's calibrator and the evidence ranker.

Both are fitted here (scikit-learn, in ``optimize/``) and stored inside a program's or a retriever's config
as JSON numbers: the feature names, the standardisation (means, scales), the weights and the bias, what
they were fitted on, and a digest of all of it, so a saved program carries them, an export ships them, and
an edited or damaged file is refused instead of silently scoring something else. No pickle, no sklearn at
inference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import Field, model_validator

from program.config import StrictConfig
from program.digest import digest
from program.errors import ConfigError

M = TypeVar("M", bound="LinearModel")


class LinearModelError(ConfigError):
    """A fitted model whose numbers do not match its digest, or that names unknown features."""


class LinearModel(StrictConfig):
    """A logistic regression over standardised features. Subclasses name the features they know
    (``KNOWN``), what they are called in messages (``KIND``) and the command that refits one (``REFIT``)."""

    KNOWN: ClassVar[tuple[str, ...]] = ()
    KIND: ClassVar[str] = "model"
    REFIT: ClassVar[str] = ""
    ERROR: ClassVar[type[LinearModelError]] = LinearModelError

    features: tuple[str, ...]
    means: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    fitted_on: dict = Field(default_factory=dict)  # dataset, corpus digest, cases, held-out scores
    digest: str = ""

    @model_validator(mode="after")
    def _check(self) -> LinearModel:
        unknown = [f for f in self.features if f not in self.KNOWN]
        if unknown:
            raise self.ERROR(f"the {self.KIND} names unknown features {unknown}; known: {', '.join(self.KNOWN)}")
        n = len(self.features)
        if not (len(self.means) == len(self.scales) == len(self.weights) == n) or n == 0:
            raise self.ERROR(f"{self.KIND}: features, means, scales and weights must have the same non-zero length")
        if self.digest != numbers_digest(self):
            raise self.ERROR(
                f"the {self.KIND}'s numbers do not match its digest (edited by hand or damaged); refit it with "
                f"`{self.REFIT}`"
            )
        return self

    @classmethod
    def make(
        cls: type[M],
        features: Sequence[str],
        means: Sequence[float],
        scales: Sequence[float],
        weights: Sequence[float],
        bias: float,
        fitted_on: Mapping[str, Any],
    ) -> M:
        """A model with its digest computed (what fitting code calls)."""
        numbers = {
            "features": tuple(features),
            "means": tuple(map(float, means)),
            "scales": tuple(map(float, scales)),
            "weights": tuple(map(float, weights)),
            "bias": float(bias),
            "fitted_on": dict(fitted_on),
        }
        return cls(**numbers, digest=digest(numbers))

    def with_info(self: M, **info: Any) -> M:
        """The same model with more ``fitted_on`` information (its digest recomputed)."""
        return self.make(self.features, self.means, self.scales, self.weights, self.bias, {**self.fitted_on, **info})

    def logit(self, features: Mapping[str, float]) -> float:
        return self.bias + sum(
            w * (float(features[f]) - m) / (s or 1.0)
            for f, m, s, w in zip(self.features, self.means, self.scales, self.weights)
        )

    def probability(self, features: Mapping[str, float]) -> float:
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, self.logit(features)))))

    def corpus_problem(self, corpus_sha256: str | None, dataset: str | None = None) -> str | None:
        """Why this model does not fit an index of ``corpus_sha256`` (of ``dataset``, when known): both datasets
        and corpora named; None when it fits or cannot be told."""
        fitted = self.fitted_on.get("corpus_sha256")
        if corpus_sha256 and fitted and fitted != corpus_sha256:
            here = f"dataset {dataset!r} (corpus {corpus_sha256[:12]})" if dataset else f"corpus {corpus_sha256[:12]}"
            return (
                f"it was fitted on dataset {self.fitted_on.get('dataset')!r} (corpus {str(fitted)[:12]}), "
                f"this index holds {here}"
            )
        return None


def refuse_other_corpus(model: LinearModel, corpus_sha256: str | None, dataset: str | None, remedy: str) -> None:
    """Raise the model's error when it was fitted on another corpus: both named, then ``remedy``."""
    problem = model.corpus_problem(corpus_sha256, dataset)
    if problem:
        raise model.ERROR(f"the {model.KIND} does not fit this index: {problem}. {remedy}")


def numbers_digest(model: Any) -> str:
    """sha256 over a model's features, numbers and ``fitted_on`` (what decides its output)."""
    payload = {k: getattr(model, k) for k in ("features", "means", "scales", "weights", "bias")}
    payload["fitted_on"] = getattr(model, "fitted_on", {})
    return digest(payload)
