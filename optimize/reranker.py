"""Train a cross-encoder reranker on a train split: gold paragraphs against hard negatives from the index.

For each training question the positives are its supporting paragraphs (found in the corpus by title) and
the negatives are the highest-ranked passages the retriever returns for it that are not supporting: the
passages a reranker must learn to put below the gold ones. Only the questions handed in are used, so a
reranker trained on the train split never saw a dev question. The model starts from the bundled MiniLM
weights (a fresh one-logit head on its encoder) and trains with binary cross-entropy on CPU.

The trained folder holds the sentence-transformers files plus ``reranker.json``
(:mod:`program.retrieval.reranker`): what it was trained on (dataset, corpus digest, question ids digest,
pairs, epochs) and a checksum of every file, so a tampered or mismatched reranker is refused when loaded.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from program.config import StrictConfig
from program.errors import ConfigError
from program.retrieval.reranker import pair_text, write_reranker_manifest
from program.types import Passage

log = logging.getLogger(__name__)


class RerankerTraining(StrictConfig):
    """How a reranker is trained (recorded whole in its manifest)."""

    negatives: int = 8  # hard negatives per question, from the retriever's top ``depth``
    depth: int = 30
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.1
    max_length: int = 256
    seed: int = 0


@dataclass(frozen=True)
class Pair:
    question_id: str
    query: str
    text: str
    label: float


def mine_pairs(
    examples: Iterable[Any],
    retrieve_many: Callable[[Sequence[str], int], list[list[Passage]]],
    by_title: Mapping[str, Passage],
    negatives: int,
    depth: int,
    seed: int = 0,
) -> list[Pair]:
    """(question, passage, label) pairs: each gold paragraph a positive, the top non-gold hits negatives.

    Negatives are the first ``negatives`` non-gold passages in the retriever's ranking (the hardest); a
    question whose gold paragraphs are not all in the corpus keeps the ones that are. Questions with no
    gold paragraph in the corpus are skipped (they teach nothing)."""
    examples = list(examples)
    rng = random.Random(seed)
    norm = {_norm(t): p for t, p in by_title.items()}
    hits: list[list[Passage]] = []
    for start in range(0, len(examples), 32):  # a vector store caps the queries of one call
        hits += retrieve_many([ex.question for ex in examples[start : start + 32]], depth)
    pairs: list[Pair] = []
    for ex, found in zip(examples, hits):
        gold = [norm[_norm(t)] for t in dict.fromkeys(getattr(ex, "gold_titles", None) or []) if _norm(t) in norm]
        if not gold:
            continue
        gold_ids = {p.id for p in gold}
        negs = [p for p in found if p.id not in gold_ids][:negatives]
        group = [Pair(ex.id, ex.question, pair_text(p), 1.0) for p in gold]
        group += [Pair(ex.id, ex.question, pair_text(p), 0.0) for p in negs]
        rng.shuffle(group)
        pairs += group
    return pairs


def _norm(title: str) -> str:
    return " ".join(str(title).lower().split())


def train_reranker(
    pairs: Sequence[Pair],
    base_model: str,
    out_dir: Path,
    settings: RerankerTraining,
    trained_on: Mapping[str, Any],
    progress: bool = True,
    on_log: Callable[[dict], None] | None = None,
) -> dict:
    """Fine-tune a CrossEncoder from ``base_model`` on ``pairs``; save it with its manifest in ``out_dir``.

    Returns the manifest (``trained_on`` plus the settings, pair counts, seconds and file checksums)."""
    if not pairs:
        raise ConfigError("no training pairs: the questions have no gold paragraph in the corpus")
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from transformers import TrainerCallback

    torch.manual_seed(settings.seed)
    model = CrossEncoder(base_model, num_labels=1, max_length=settings.max_length)
    data = Dataset.from_dict(
        {"query": [p.query for p in pairs], "passage": [p.text for p in pairs], "label": [p.label for p in pairs]}
    )
    n_pos = sum(p.label > 0 for p in pairs)
    # the positives are few (two per question): weigh them so that both classes count alike
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor((len(pairs) - n_pos) / max(n_pos, 1)))
    tmp = out_dir.parent / f".{out_dir.name}.training"
    args = CrossEncoderTrainingArguments(
        output_dir=str(tmp),
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        warmup_ratio=settings.warmup_ratio,
        seed=settings.seed,
        save_strategy="no",
        logging_steps=20,
        report_to=[],
        disable_tqdm=not progress,
        use_cpu=True,
        dataloader_num_workers=0,
    )

    class _Log(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if logs and on_log is not None:
                on_log({"step": state.global_step, **logs})

    t0 = time.perf_counter()
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[_Log()])
    trainer.train()
    seconds = time.perf_counter() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    manifest = {
        **dict(trained_on),
        "base_model": str(base_model),
        "training": settings.model_dump(),
        "pairs": len(pairs),
        "positives": n_pos,
        "questions": len({p.question_id for p in pairs}),
        "train_seconds": round(seconds, 1),
        "pairs_per_second": round(len(pairs) * settings.epochs / seconds, 2) if seconds else None,
    }
    write_reranker_manifest(out_dir, manifest)
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return manifest
