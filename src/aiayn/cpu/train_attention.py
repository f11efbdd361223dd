"""Which kernel computes eq. (1) while training. Not in the paper: a speed measure.

`F.scaled_dot_product_attention` (aiayn.model.attention) lets PyTorch pick its kernel. On a CPU it
picks the fused flash-attention kernel, which works through each head and block of queries in
turn; for short sentences and narrow heads that bookkeeping costs more than the products. Its
math kernel, the formula itself (QK^T, softmax, times V, as batched products over every head at
once), is faster there on short batches and slower on long sequences (the step times of each kernel on the
recipes' shapes: docs/studies/training-quality.md, "Eq. (1)'s kernel").

train.attention picks: "math", "fused" (PyTorch's own choice), or "auto": on a CPU, math for a
batch whose longest side is at most MATH_UP_TO positions and fused for longer ones; fused on a
GPU, where the fused kernels are the fast ones. It is a rule on the batch's shape, not a
measurement, so a resumed run computes exactly what the uninterrupted one did. Both kernels
compute the same function; results differ by rounding only.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = ("auto", "fused", "math")
MATH_UP_TO = 128  # positions: math won at 15 and 65, fused at 256 (above)


def attention_kernel(name: str, device: torch.device, length: int = 0) -> str:
    """The kernel train.attention names for a batch whose longer side has `length` positions: "fused" or "math"."""
    if name not in KERNELS:
        raise ValueError(f"train.attention: {name!r} is not one of {', '.join(KERNELS)}")
    if name != "auto":
        return name
    return "math" if device.type == "cpu" and length <= MATH_UP_TO else "fused"


def attention(kernel: str) -> contextlib.AbstractContextManager:
    """A context in which eq. (1) runs on `kernel` ("math" or "fused"): wrap the forward pass in it."""
    return sdpa_kernel([SDPBackend.MATH]) if kernel == "math" else contextlib.nullcontext()
