import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from account_tax.training.loss import (
    class_weights,
    forward_loss,
    label_counts,
    weighted_cross_entropy,
)
from account_tax.training.model import build_model, load_tokenizer


def test_weights_follow_the_formula():
    counts = np.array([10, 30, 60])
    total, classes, alpha = 100, 3, 0.4
    expected = torch.tensor([(total / (classes * int(c))) ** alpha for c in counts])
    assert torch.allclose(class_weights(counts, alpha), expected)


def test_alpha_zero_is_the_unweighted_loss():
    assert torch.equal(class_weights(np.array([1, 5, 500]), 0.0), torch.ones(3))


def test_empty_class_weighs_as_a_class_with_one_percent_of_the_mean_count():
    counts = np.array([50, 150, 0, 0])
    weights = class_weights(counts, 0.4)
    mean = counts.sum() / len(counts)
    as_if_counted = (counts.sum() / (len(counts) * 0.01 * mean)) ** 0.4
    assert weights[2].item() == pytest.approx(as_if_counted)
    assert weights[3] == weights[2]
    assert weights[2] > weights[0] > weights[1]


def test_counts_come_from_the_train_label_ids_with_every_class(ledger):
    import polars as pl

    labels = json.loads(ledger["label_map"].read_text())["labels"]
    label_ids = pl.read_parquet(ledger["train"])["label_id"].to_numpy()
    counts = label_counts(label_ids, len(labels))
    assert len(counts) == len(labels)
    assert counts.tolist() == [40, 40, 40, 40, 0]
    assert label_counts(np.array([0, 2, 2, 4]), 6).tolist() == [1, 0, 2, 0, 1, 0]


def test_mean_is_the_weighted_average():
    torch.manual_seed(0)
    logits = torch.randn(4, 3)
    labels = torch.tensor([0, 1, 2, 2])
    weights = torch.tensor([0.5, 1.0, 2.0])
    nll = F.cross_entropy(logits, labels, reduction="none")
    expected = (weights[labels] * nll).sum() / weights[labels].sum()
    assert weighted_cross_entropy(logits, labels, weights).item() == pytest.approx(expected.item())


# The GPU case runs where there is a GPU; elsewhere it is not collected (rather than skipped).
@pytest.mark.parametrize("device", ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
def test_the_loss_of_bf16_logits_is_computed_in_float32_on_their_device(device):
    torch.manual_seed(0)
    logits = (torch.randn(64, 300, device=device) * 4).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 300, (64,), device=device)
    weights = torch.rand(300)  # float32 weights on the CPU
    loss = weighted_cross_entropy(logits, labels, weights)
    assert loss.dtype == torch.float32
    assert loss.device.type == device
    exact = F.cross_entropy(
        logits.detach().double(), labels, weight=weights.double().to(device)
    ).item()
    assert loss.item() == pytest.approx(exact, rel=1e-6)
    loss.backward()
    assert logits.grad.dtype == torch.bfloat16


def test_labels_stay_out_of_the_model_forward(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    model = build_model(tiny_bert, ["a", "b", "c"], "linear")
    calls = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(dict(kwargs)), with_kwargs=True
    )
    batch = dict(tokenizer(["vendor staples", "memo rent"], padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([0, 2])
    weights = torch.tensor([1.0, 2.0, 3.0])

    loss, logits = forward_loss(model, batch, weights)

    assert len(calls) == 1 and "labels" not in calls[0]
    assert torch.equal(loss, weighted_cross_entropy(logits, batch["labels"], weights))
    loss.backward()
    assert model.classifier.weight.grad is not None
