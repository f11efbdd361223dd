"""Mixed precision for training: bf16 autocast, or fp16 autocast with a gradient scaler.

The paper trained in fp32 (§5.2, P100 GPUs). Under autocast the weights, the optimizer state and
the loss (`projected_smoothed_nll` upcasts the logits a few rows at a time) stay in fp32; only the
matrix products run in the low precision. bf16 has fp32's exponent range and needs no scaling.
fp16 does: the loss is multiplied by a scale before the backward pass, the gradients are divided
by it before the step, and a step whose gradients overflowed is skipped while the scale is halved.
"""

from __future__ import annotations

import contextlib

import torch


def autocast_dtype(bf16: bool | str, fp16: bool, device: torch.device | None = None) -> torch.dtype | None:
    """The autocast dtype of the recipe's train.bf16 / train.fp16 flags; None = fp32.

    bf16 "auto" is bf16 where the device multiplies in it natively (a CPU with AVX512-BF16 or AMX, where a step
    takes less time than in fp32; elsewhere a CPU emulates it and is slower than fp32), and fp32 otherwise.
    """
    if bf16 == "auto":  # fp16 asked for by name wins over the guess
        bf16 = not fp16 and native_bf16(device or torch.device("cpu"))
    if bf16 and fp16:
        raise ValueError("train.bf16 and train.fp16 are both true; choose one")
    return torch.bfloat16 if bf16 else torch.float16 if fp16 else None


def native_bf16(device: torch.device) -> bool:
    """Whether the device has bf16 matrix instructions (CUDA: Ampere or newer; x86: AVX512-BF16 or AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return False


def check_device(device: torch.device, dtype: torch.dtype | None) -> None:
    """A clear error when the device cannot run dtype (bf16 needs an Ampere or newer GPU)."""
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ValueError(f"{torch.cuda.get_device_name(device)} has no bf16 support; use train.fp16=true instead")


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """torch.autocast on the device's type in dtype, or nothing for fp32."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A gradient scaler that is active for fp16 only (a disabled scaler passes everything through)."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
