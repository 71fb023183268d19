"""The head's final rows: the ones training learned, or the classes' prototypes.

A class's prototype is the mean direction of its training records as the trained model embeds
them, with the class's text counted as one more record where the classes have names: a
nearest-class-mean classifier over the fine-tuned embedding. With a handful of records per class
a head row learns little from them in a few epochs, while the embedding all classes share has
been fine-tuned on every record. On 1,229 HS headings with a median of 3 records each the
prototypes scored 0.850 validation macro-F1 against 0.803 for the learned rows; on the bundled
data (a median of 4 records per account) 0.945 against 0.947 (docs/training.md). Where the
accounts' texts are training records too (serialize.class_texts), the learned rows catch up, and
their *blend* with the prototypes (the mean of the two unit rows) scores higher than either.
`best` keeps whichever of the three scores highest on validation, the learned rows on a tie.
Cosine head only: a prototype is a direction, and a linear head's row also carries a norm and a
bias.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import accuracy_score, f1_score
from transformers import PreTrainedTokenizerBase

from account_tax.data.features import LABEL_MAP, postable_mask
from account_tax.data.serialize import read_labels
from account_tax.data.spec import CHART, LABEL_SOURCE
from account_tax.training.evidence import ACCOUNT, INDEX_DIR, EvidenceIndex
from account_tax.training.head_init import embed_texts, text_classifier, trained_head
from account_tax.training.inference import rewrite_head

log = logging.getLogger(__name__)

LEARNED, PROTOTYPES, BLEND = "learned", "prototypes", "blend"


@dataclass(frozen=True)
class HeadChoice:
    used: str
    # Per candidate (learned, prototypes): validation macro-F1 and accuracy.
    macro_f1: dict[str, float]
    accuracy: dict[str, float]
    seconds: float

    def metrics(self) -> dict[str, Any]:
        """The training metrics it adds. The exported model's validation figures become the
        used head's where it is not the learned one (whose figures the training loop gave)."""
        added = {
            "final_head": self.used,
            **{f"validation_macro_f1_{name}": value for name, value in self.macro_f1.items()},
            "final_head_seconds": self.seconds,
        }
        if self.used != LEARNED and self.used in self.macro_f1:
            added["validation_macro_f1"] = self.macro_f1[self.used]
            added["validation_accuracy"] = self.accuracy[self.used]
        return added


def prototypes(
    vectors: torch.Tensor,
    label_ids: np.ndarray,
    num_labels: int,
    text_vectors: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per class, the unit mean direction of its records' unit vectors and of its text's, and
    whether it has any (a class with neither keeps its learned row)."""
    sums = torch.zeros(num_labels, vectors.shape[1], dtype=torch.float32)
    sums.index_add_(0, torch.as_tensor(label_ids, dtype=torch.long), vectors.float())
    members = torch.bincount(torch.as_tensor(label_ids, dtype=torch.long), minlength=num_labels)
    if text_vectors is not None:
        sums += F.normalize(text_vectors.float(), dim=1)
        members += 1
    return F.normalize(sums, dim=1), members > 0


def head_scores(
    rows: torch.Tensor, vectors: torch.Tensor, label_ids: np.ndarray, postable: np.ndarray
) -> tuple[float, float]:
    """Macro-F1 (over the classes present, as evaluate computes it) and accuracy of a cosine
    head with these rows; a class that takes no postings is never predicted."""
    similarity = vectors.float() @ F.normalize(rows.float(), dim=1).T
    similarity[:, ~torch.from_numpy(postable)] = -torch.inf
    predicted = similarity.argmax(dim=1).numpy()
    present = np.unique(label_ids)
    macro_f1 = f1_score(label_ids, predicted, labels=present, average="macro", zero_division=0)
    return float(macro_f1), float(accuracy_score(label_ids, predicted))


def choose_final_head(
    model_dir: Path, requested: str, texts: list[str] | None, max_length: int
) -> HeadChoice:
    """Score the saved model's learned rows, its classes' prototypes and their blend on
    validation, from the vectors of its evidence index, and keep the `requested` rows (`best`:
    the highest scoring) in the saved head."""
    started = time.perf_counter()
    labels = read_labels(model_dir / LABEL_MAP)
    postable = postable_mask(model_dir / LABEL_MAP)
    index = EvidenceIndex.read(model_dir / INDEX_DIR)
    position = {label: i for i, label in enumerate(labels)}
    splits = {}
    for split in ("train", "validation"):
        part = index.part(split)
        # An account's own text (serialize.class_texts) counts once, as its text below.
        records = part.records[LABEL_SOURCE].to_numpy() != CHART
        accounts = part.records[ACCOUNT].to_numpy()[records]
        ids = np.array([position[a] for a in accounts], dtype=np.int64)
        splits[split] = (torch.from_numpy(part.vectors[records]), ids)

    def rewrite(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> HeadChoice:
        head = trained_head(model)
        text_vectors = None
        if texts is not None:
            text_vectors = embed_texts(text_classifier(model), tokenizer, texts, max_length).cpu()
        learned = head.weight.detach().float().cpu()
        rows, has = prototypes(*splits["train"], len(labels), text_vectors)
        blend = F.normalize(F.normalize(learned, dim=1) + rows, dim=1)
        candidates = {
            LEARNED: learned,
            PROTOTYPES: torch.where(has[:, None], rows, learned),
            BLEND: torch.where(has[:, None], blend, learned),
        }
        macro_f1, accuracy = {}, {}
        # Without validation rows nothing is scored: `best` keeps the learned rows.
        if len(splits["validation"][1]):
            for name, candidate in candidates.items():
                scores = head_scores(candidate, *splits["validation"], postable)
                macro_f1[name], accuracy[name] = scores
        used = requested
        if requested == "best":
            # The first of the highest: the learned rows on a tie.
            used = max(candidates, key=macro_f1.get) if macro_f1 else LEARNED
        if used != LEARNED:
            # Each row keeps its norm: a cosine head reads directions only.
            norm = learned.norm(dim=1, keepdim=True)
            with torch.no_grad():
                head.weight.copy_((candidates[used] * norm).to(head.weight))
        return HeadChoice(used, macro_f1, accuracy, time.perf_counter() - started)

    choice = rewrite_head(model_dir, rewrite)
    scored = ", ".join(f"{name} {value:.4f}" for name, value in choice.macro_f1.items())
    log.info(
        "final head: %s (validation macro-F1: %s; %.1f s)",
        choice.used,
        scored or "no validation rows",
        choice.seconds,
    )
    return choice
