"""Class-weighted cross-entropy: rare account codes count more, without drowning the common ones."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

EMPTY_CLASS_SHARE = 0.01
"""A class without training samples is weighted as if it had 1 % of the mean class count."""


def label_counts(label_ids: np.ndarray, num_labels: int) -> np.ndarray:
    """Samples per class in the training split, zero for classes it does not contain."""
    return np.bincount(label_ids, minlength=num_labels)


def class_weights(counts: np.ndarray, alpha: float) -> torch.Tensor:
    """weight_c = (N / (C * count_c)) ** alpha: 1 for a class of mean size; alpha 0 is unweighted.

    An empty class would get an infinite weight; it gets that of a class with 1 % of the mean
    count instead: finite, and more than a class of ordinary size, though a class of a handful
    of rows may weigh more where the mean count is in the hundreds.
    """
    counts = np.asarray(counts, dtype=np.float64)
    total, num_classes = counts.sum(), len(counts)
    effective = np.where(counts > 0, counts, EMPTY_CLASS_SHARE * total / num_classes)
    return torch.tensor((total / (num_classes * effective)) ** alpha, dtype=torch.float32)


def weighted_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """The loss in float32 whatever the logits' dtype (bf16/fp16 training): the log-softmax over
    hundreds of classes and the weighted mean lose digits in 16 bits. Every row has a label (the
    split reader refuses a row without one)."""
    return F.cross_entropy(
        logits.float(),
        labels,
        weight=weights.to(device=logits.device, dtype=torch.float32),
        reduction=reduction,
    )


def forward_loss(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The weighted loss of one batch and its logits.

    The labels stay out of the forward call: given labels, the model computes its own unweighted
    loss as well, a second graph that is never used.
    """
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return weighted_cross_entropy(logits, batch["labels"], weights), logits
