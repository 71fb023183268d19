"""The classifier of account codes: a pretrained backbone, its token states pooled into one vector
per record, and a linear or cosine head over the classes.

Encoders are pooled by the mean over their tokens, the way sentence-embedding models such as
all-MiniLM are trained, so a record and an account's name land in the same space; decoders by the
last token that is not padding, the only one that has read the whole text. The same pooling
embeds the class texts that can start the head (see `head_init`).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

HEAD_WEIGHTS = "classifier.safetensors"
"""The head's weights beside a saved backbone (full fine-tuning, or a merged adapter)."""
INITIAL_COSINE_SCALE = 20.0
"""Cosines lie in [-1, 1]: scaled by 20, a class whose cosine leads by 0.4 gets about 90 % of the
probability among 250 classes. The scale is learned from there."""


def pooling_for(config) -> str:
    """`mean` for models trained as encoders (masked language models), `last` for decoders."""
    return "mean" if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "last"


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[batch, tokens, hidden] to [batch, hidden]; padding, left or right, is never read."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    if pooling == "mean":
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    positions = torch.arange(hidden.shape[1], device=hidden.device)
    last = (attention_mask * positions).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


# Both heads compute in float32 whatever the model's precision: in bfloat16, logits near a cosine
# head's scale (about 20) are 0.125 apart, noise in the odds calibration and thresholds read.
class LinearHead(nn.Module):
    """logits = W·h + b. Rows of classes with no training rows can be held (see `hold_rows`)."""

    def __init__(self, hidden_size: int, num_labels: int, std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_labels, hidden_size) * std)
        self.bias = nn.Parameter(torch.zeros(num_labels))
        self.register_buffer("learned", torch.ones(num_labels, dtype=torch.bool), persistent=False)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        weight, bias = held(self.weight, self.learned), held(self.bias, self.learned)
        return F.linear(pooled.float(), weight.float(), bias.float())


class CosineHead(nn.Module):
    """logits = s · cos(h, w_c): every class on the same scale, seen in training or not."""

    def __init__(self, hidden_size: int, num_labels: int, std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_labels, hidden_size) * std)
        # One element, not a 0-d tensor: DeepSpeed broadcasts parameters as bytes.
        self.scale = nn.Parameter(torch.tensor([INITIAL_COSINE_SCALE]))
        self.register_buffer("learned", torch.ones(num_labels, dtype=torch.bool), persistent=False)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        weight = F.normalize(held(self.weight, self.learned).float(), dim=-1)
        return self.scale.float() * F.normalize(pooled.float(), dim=-1) @ weight.T


def held(parameter: torch.Tensor, learned: torch.Tensor) -> torch.Tensor:
    """The parameter, with no gradient reaching the rows where `learned` is False. No branch on
    the mask's values: a compiled model would break its graph there."""
    shape = (-1,) + (1,) * (parameter.ndim - 1)
    return torch.where(learned.view(shape), parameter, parameter.detach())


class TextClassifier(nn.Module):
    """Backbone, pooling and head; called like a Hugging Face sequence classifier.

    `config` is the backbone's, with the labels: peft reads the model type from it to find the
    layers to adapt.
    """

    def __init__(self, backbone: PreTrainedModel, labels: list[str], head: str) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = backbone.config
        self.config.num_labels = len(labels)
        self.config.id2label = dict(enumerate(labels))
        self.config.label2id = {label: index for index, label in enumerate(labels)}
        self.pooling = pooling_for(self.config)
        # The pooled vector is all the head reads: an unused pooler would only cost time, and
        # under ZeRO parameters that never get a gradient stall the reduction.
        if getattr(backbone, "pooler", None) is not None:
            backbone.pooler = None
        head_class = {"linear": LinearHead, "cosine": CosineHead}[head]
        std = getattr(self.config, "initializer_range", 0.02)
        self.classifier = head_class(self.config.hidden_size, len(labels), std)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        return pool(hidden.last_hidden_state, attention_mask, self.pooling)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **unused: object
    ) -> SequenceClassifierOutput:
        # peft passes the standard classifier arguments (labels, return_dict, ...), all None
        # here: the weighted loss is computed outside (see loss.forward_loss).
        return SequenceClassifierOutput(
            logits=self.classifier(self.embed(input_ids, attention_mask))
        )


def hold_rows(head: nn.Module, rows: torch.Tensor) -> None:
    """No gradient to these classes' rows: with no training rows, all a gradient could teach
    them is never to be predicted, and their start (the class text) is all that is known."""
    head.learned[rows] = False


def load_backbone(model_dir: Path, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """The model without any head (a causal LM's output layer is left out)."""
    return AutoModel.from_pretrained(model_dir, dtype=dtype, use_cache=False)


def save_full_classifier(
    model: TextClassifier, folder: Path, state: dict[str, torch.Tensor] | None = None
) -> None:
    """Backbone in the Hugging Face form and the head beside it; `state`: the model's weights
    where the model itself holds shards of them (FSDP)."""
    state = state or model.state_dict()
    parts = {
        part: {
            name.removeprefix(f"{part}."): tensor.contiguous()
            for name, tensor in state.items()
            if name.startswith(f"{part}.")
        }
        for part in ("backbone", "classifier")
    }
    model.backbone.save_pretrained(folder, state_dict=parts["backbone"])
    save_file(parts["classifier"], folder / HEAD_WEIGHTS)


def load_full_classifier(
    folder: Path, labels: list[str], head: str, dtype: torch.dtype = torch.float32
) -> TextClassifier:
    model = TextClassifier(load_backbone(folder, dtype), labels, head)
    model.classifier.load_state_dict(load_file(folder / HEAD_WEIGHTS))
    return model.to(dtype)
