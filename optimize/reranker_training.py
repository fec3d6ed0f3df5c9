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

    negatives: int = 5  # hard negatives per question, from the retriever's top ``depth``
    depth: int = 30
    epochs: int = 3
    batch_size: int = 24  # pairs per step: batch_size // (1 + negatives) gold paragraphs with their negatives
    learning_rate: float = 2e-4  # 5e-5 left the loss at ln(6) after 50 steps: the MiniLM [CLS] path starts flat
    warmup_ratio: float = 0.1
    max_length: int = 128  # question + title + about 450 characters of the passage
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


def listwise_groups(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """One group per gold paragraph: it first, then its question's negatives (questions without a
    negative teach nothing listwise and are left out)."""
    by_q: dict[str, list[Pair]] = {}
    for p in pairs:
        by_q.setdefault(p.question_id, []).append(p)
    groups = []
    for ps in by_q.values():
        negs = [p for p in ps if p.label <= 0]
        groups += [[pos, *negs] for pos in ps if pos.label > 0 and negs]
    return groups


def _norm(title: str) -> str:
    return " ".join(str(title).lower().split())


def _warmup_then_decay(optimizer: Any, total: int, warmup: int) -> Any:
    """A learning-rate schedule rising linearly over ``warmup`` steps, then falling linearly to 0 at ``total``."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
    )


def _listwise_loss(model: Any, tokenizer: Any, batch: Sequence[Sequence[Pair]], max_length: int) -> Any:
    """The mean over ``batch``'s groups of the cross-entropy of picking each group's gold passage (its first)."""
    import torch

    flat = [p for g in batch for p in g]
    enc = tokenizer(
        [p.query for p in flat],
        [p.text for p in flat],
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    logits = model(**enc).logits.squeeze(-1)
    loss, offset = logits.new_zeros(()), 0
    for g in batch:  # the gold passage is each group's first
        loss = loss + torch.nn.functional.cross_entropy(
            logits[offset : offset + len(g)].unsqueeze(0), logits.new_zeros(1, dtype=torch.long)
        )
        offset += len(g)
    return loss / len(batch)


def _fit_listwise(
    model: Any,
    tokenizer: Any,
    groups: list[list[Pair]],
    settings: RerankerTraining,
    progress: bool,
    on_log: Callable[[dict], None] | None,
) -> tuple[float, float]:
    """Train ``model`` on ``groups`` (shuffled each epoch; AdamW, warm-up then linear decay, clipped
    gradients). Returns the final running loss and the seconds the loop took."""
    import torch
    from tqdm.auto import tqdm

    per_batch = max(1, settings.batch_size // (1 + settings.negatives))  # groups per step
    steps_per_epoch = (len(groups) + per_batch - 1) // per_batch
    total = steps_per_epoch * settings.epochs
    warmup = max(1, int(total * settings.warmup_ratio))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01)
    schedule = _warmup_then_decay(optimizer, total, warmup)
    rng = random.Random(settings.seed)
    model.train()
    t0, step, running = time.perf_counter(), 0, 0.0
    with tqdm(total=total, desc="train-reranker", disable=not progress) as bar:
        for epoch in range(settings.epochs):
            rng.shuffle(groups)
            for start in range(0, len(groups), per_batch):
                loss = _listwise_loss(model, tokenizer, groups[start : start + per_batch], settings.max_length)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                step += 1
                running = 0.9 * running + 0.1 * loss.item() if step > 1 else loss.item()
                bar.update(1)
                bar.set_postfix(loss=f"{running:.3f}", epoch=epoch)
                if on_log is not None and step % 20 == 0:
                    on_log({"step": step, "loss": running, "learning_rate": schedule.get_last_lr()[0]})
    return running, time.perf_counter() - t0


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

    A plain PyTorch loop over the CrossEncoder's model (AdamW, linear warm-up and decay), seeded, with a
    listwise loss: each gold paragraph is scored against its question's hard negatives and the loss is
    the cross-entropy of picking it (a pointwise loss on these few hard pairs left the model at the
    class prior). Returns the manifest (``trained_on`` plus the settings, pair counts, seconds and file
    checksums)."""
    if not pairs:
        raise ConfigError("no training pairs: the questions have no gold paragraph in the corpus")
    import torch
    from sentence_transformers.cross_encoder import CrossEncoder

    torch.manual_seed(settings.seed)
    encoder = CrossEncoder(base_model, num_labels=1, max_length=settings.max_length)
    model, tokenizer = encoder.model, encoder.tokenizer
    groups = listwise_groups(pairs)
    n_pos = sum(p.label > 0 for p in pairs)
    running, seconds = _fit_listwise(model, tokenizer, groups, settings, progress, on_log)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder.save_pretrained(str(out_dir))
    manifest = {
        **dict(trained_on),
        "base_model": str(base_model),
        "training": settings.model_dump(),
        "loss": "listwise",
        "groups": len(groups),
        "pairs": len(pairs),
        "positives": n_pos,
        "questions": len({p.question_id for p in pairs}),
        "train_seconds": round(seconds, 1),
        "final_loss": round(running, 4),
        "pairs_per_second": round(len(pairs) * settings.epochs / seconds, 2) if seconds else None,
    }
    write_reranker_manifest(out_dir, manifest)
    return manifest
