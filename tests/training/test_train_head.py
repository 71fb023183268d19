"""The head from the chart of accounts: rows start as the class texts' embeddings, classes without
training rows get no gradient and end as their text embedded by the trained model."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from account_tax.data.label_map import LabelMap
from account_tax.training.classifier import CosineHead, LinearHead, hold_rows, pool
from account_tax.training.head_init import (
    embed_texts,
    init_head_from_texts,
    resolve_head_init,
    text_classifier,
    trained_head,
)
from account_tax.training.inference import load_classifier, predict_probabilities
from account_tax.training.model import build_model, load_tokenizer, prepare_for_training
from account_tax.training.settings import LoraSettings

LABELS = ["office", "travel", "rent", "unused"]
TEXTS = ["office supplies: paper and toner", "travel: flights and hotels", "rent", "bank fees"]


def one_class_map(name: str | None) -> LabelMap:
    return LabelMap("account", ["a"], {"a": 1}, [name], [None], [None], [True])


def test_auto_starts_from_the_class_texts_only_where_classes_have_names():
    assert resolve_head_init("auto", one_class_map("Cash")) == "label_text"
    assert resolve_head_init("auto", one_class_map(None)) == "random"
    assert resolve_head_init("random", one_class_map("Cash")) == "random"


@pytest.mark.parametrize("head", ["linear", "cosine"])
@pytest.mark.parametrize("model_name", ["tiny_bert", "tiny_llama"])
def test_head_rows_start_as_the_class_text_embeddings_at_the_random_rows_norm(
    request, model_name, head
):
    folder = request.getfixturevalue(model_name)
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(0)
    model = build_model(folder, LABELS, head)
    random_norm = model.classifier.weight.norm(dim=1).mean().item()
    init_head_from_texts(model, tokenizer, TEXTS, max_length=32)
    expected = embed_texts(model, tokenizer, TEXTS, max_length=32)
    rows = model.classifier.weight.detach()
    assert torch.allclose(F.cosine_similarity(rows, expected, dim=1), torch.ones(4), atol=1e-5)
    assert torch.allclose(rows.norm(dim=1), torch.full((4,), random_norm), rtol=1e-4)
    # A record whose text is a class's text is closest to that class's row.
    record = embed_texts(model, tokenizer, ["bank fees"], max_length=32)
    assert F.cosine_similarity(record, rows).argmax().item() == 3


def test_pooling_reads_only_the_real_tokens():
    hidden = torch.arange(12, dtype=torch.float32).view(1, 4, 3)
    right = torch.tensor([[1, 1, 0, 0]])
    left = torch.tensor([[0, 0, 1, 1]])
    assert pool(hidden, right, "mean").tolist() == [[1.5, 2.5, 3.5]]
    assert pool(hidden, right, "last").tolist() == [[3.0, 4.0, 5.0]]
    assert pool(hidden, left, "last").tolist() == [[9.0, 10.0, 11.0]]


@pytest.mark.parametrize("head", [LinearHead, CosineHead])
def test_a_bfloat16_model_gets_float32_logits_from_its_head(head):
    """The logits calibration and the auto-post threshold read are computed in float32 from a
    bfloat16 model's pooled vector and head: in bfloat16, logits near a cosine head's scale are
    0.125 apart."""
    torch.manual_seed(0)
    module = head(32, 235, std=0.02).to(torch.bfloat16)
    if head is CosineHead:
        module.scale.data.fill_(23.7)
    pooled = torch.randn(8, 32).to(torch.bfloat16)
    logits = module(pooled)
    assert logits.dtype == torch.float32
    weight = module.weight.float()
    expected = (
        F.linear(pooled.float(), weight, module.bias.float())
        if head is LinearHead
        else module.scale.float()
        * F.normalize(pooled.float(), dim=-1)
        @ F.normalize(weight, dim=-1).T
    )
    assert torch.allclose(logits, expected, atol=1e-5)


@pytest.mark.parametrize("lora", [LoraSettings.of(r=4), LoraSettings.of(enabled=False)])
@pytest.mark.parametrize("head", ["linear", "cosine"])
def test_rows_of_classes_without_training_rows_get_no_gradient(tiny_bert, head, lora):
    tokenizer = load_tokenizer(tiny_bert)
    model = build_model(tiny_bert, LABELS, head)
    hold_rows(model.classifier, torch.tensor([False, False, False, True]))
    model = prepare_for_training(model, lora, False).train()
    batch = tokenizer(["memo rent", "taxi to the airport"], padding=True, return_tensors="pt")
    logits = model(**batch).logits
    F.cross_entropy(logits, torch.tensor([2, 1])).backward()
    grad = trained_head(model).weight.grad
    assert grad[3].abs().sum() == 0
    assert (grad[:3].abs().sum(dim=1) > 0).all()
    # The held class still gets a logit: it can be predicted.
    assert torch.isfinite(logits[:, 3]).all()


@pytest.mark.parametrize(
    ("model_name", "head", "lora", "deepspeed_config"),
    [
        ("tiny_bert", "cosine", {"enabled": True, "r": 4, "alpha": 8}, "zero2"),
        ("tiny_llama", "linear", {"enabled": False}, "zero3"),
    ],
)
def test_a_class_without_training_rows_is_represented_by_its_text_after_training(
    request, ledger, tiny_settings, run_training, tmp_path, model_name, head, lora, deepspeed_config
):
    """The ledger's class `unused` has no rows; named `bank fees`, a record reading `bank fees`
    is predicted as it by the cosine head, whose rows are all on one scale."""
    folder = request.getfixturevalue(model_name)
    label_map = replace(
        LabelMap.read(ledger["label_map"]),
        names=["office supplies", "travel", "software", "rent", "bank fees"],
    )
    named = tmp_path / "label_map.json"
    label_map.write(named)
    settings = tiny_settings(
        folder,
        epochs=1,
        head=head,
        lora=lora,
        deepspeed_config=f"config/deepspeed/{deepspeed_config}.json",
        learning_rate=1e-3,
    )
    run_training(ledger | {"label_map": named}, tmp_path, settings)

    info = json.loads((tmp_path / "model" / "training_info.json").read_text(encoding="utf-8"))
    assert info["head_init"]["method"] == "label_text"
    assert info["head_init"]["held_classes"] == 1
    model, tokenizer, labels = load_classifier(tmp_path / "model", dtype=torch.float32)
    trained_text = embed_texts(text_classifier(model), tokenizer, ["bank fees"], max_length=48)
    row = trained_head(model).weight[4:5].detach()
    assert F.cosine_similarity(row, trained_text).item() == pytest.approx(1.0, abs=1e-4)
    if head == "cosine":
        probabilities = predict_probabilities(model, tokenizer, ["bank fees"], max_length=48)
        assert labels[int(np.argmax(probabilities[0]))] == "unused"
