"""Which number format to compute in. Training's `auto` is fp32 on a GPU and bf16 on a CPU that
computes it natively, else fp32, as measured for the bundled models (bench/README.md); inference
runs in bf16 wherever the device has it. Losses and softmax stay in fp32 whatever this says."""

from __future__ import annotations

import torch


def cpu_has_bf16() -> bool:
    """Native bf16 dot products (AVX-512 BF16 or AMX), where bf16 runs about twice the fp32 rate;
    elsewhere it is emulated and slower than fp32."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_precision(requested: str, device: torch.device) -> str:
    """`auto`: fp32 on a GPU, where a small model's step is bound by kernel launches and bf16's
    casts cost more than its arithmetic saves (on an H200, MiniLM trained 4x and SmolLM2-135M
    1.5-3x faster in fp32); on CPU bf16 where the processor has native bf16, else fp32."""
    if device.type == "cuda":
        return "fp32" if requested == "auto" else requested
    if requested == "auto":
        return "bf16" if cpu_has_bf16() else "fp32"
    if requested == "fp16":
        raise ValueError("train.precision fp16 needs a GPU; use auto, bf16 or fp32 on CPU")
    if requested == "bf16" and not cpu_has_bf16():
        raise ValueError(
            "train.precision bf16: this CPU has no native bf16 (avx512_bf16 or AMX) and would "
            "run it slower than fp32; use auto or fp32"
        )
    return requested


def inference_dtype(device: str | torch.device) -> torch.dtype:
    """Evaluation and prediction: bf16 where the device computes it natively, else fp32."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_has_bf16() else torch.float32
