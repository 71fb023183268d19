"""The trained classifier as an ONNX model for ONNX Runtime on CPUs: the adapter merged into the
base weights, exported in float32 with two outputs, the class logits and the pooled embedding
(the evidence index's space), optionally with int8 weights (dynamic quantization)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from account_tax.training.classifier import TextClassifier
from account_tax.training.inference import load_classifier, score_batches

log = logging.getLogger(__name__)

ONNX_MODEL = "model.onnx"
INPUTS = ("input_ids", "attention_mask")
OUTPUTS = ("logits", "pooled")


class ExportedScorer(torch.nn.Module):
    """What `inference.score_texts` reads of the classifier, as one graph: logits and pooled."""

    def __init__(self, classifier: TextClassifier) -> None:
        super().__init__()
        self.classifier = classifier

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = self.classifier.embed(input_ids, attention_mask)
        return self.classifier.classifier(pooled), pooled


def export_onnx(model_dir: Path, target: Path, runtime: str) -> None:
    """Export the model in `model_dir` to `target` (an .onnx file) for `runtime`: float32 for
    `onnx`, int8 weights for `onnx-int8`."""
    model, tokenizer, _ = load_classifier(model_dir, dtype=torch.float32)
    if isinstance(model, PeftModel):
        model = model.merge_and_unload()
    example = tokenizer(["an example record", "another one"], padding=True, return_tensors="pt")
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    float32 = target.with_name(f"float32-{target.name}") if runtime == "onnx-int8" else target
    torch.onnx.export(
        ExportedScorer(model).eval(),
        tuple(example[name] for name in INPUTS),
        float32,
        input_names=list(INPUTS),
        output_names=list(OUTPUTS),
        dynamic_shapes={name: {0: batch, 1: sequence} for name in INPUTS},
        dynamo=True,
        external_data=False,
    )
    if runtime == "onnx-int8":
        quantize_dynamic(float32, target, weight_type=QuantType.QInt8)
        float32.unlink()
    log.info("%s: %s model, %.1f MB", target, runtime, target.stat().st_size / 1e6)


class OnnxScorer:
    """An exported model in an ONNX Runtime session on the CPU; called as `score_batches`'
    forward: token ids and mask in, float32 logits and pooled embeddings out."""

    def __init__(self, path: Path, threads: int) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        logits, pooled = self.session.get_outputs()
        self.shape = (logits.shape[1], pooled.shape[1])

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray]:
        feed = {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()}
        logits, pooled = self.session.run(list(OUTPUTS), feed)
        return logits, pooled

    def score_texts(
        self, tokenizer: PreTrainedTokenizerBase, texts: list[str], batch_size: int, max_length: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Logits and pooled embeddings of `texts`, batched as `inference.score_texts` does."""
        return score_batches(self, tokenizer, texts, batch_size, max_length, self.shape)
