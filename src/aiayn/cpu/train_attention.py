"""Which kernel computes eq. (1) while training. Not in the paper: a speed measure.

`F.scaled_dot_product_attention` (aiayn.model.attention) lets PyTorch pick its kernel. On a CPU it
picks the fused flash-attention kernel, which works through each head and block of queries in
turn; for short sentences and narrow heads that bookkeeping costs more than the products. Its
math kernel, the formula itself (QK^T, softmax, times V, as batched products over every head at
once), is faster there under bf16 autocast and slower on long sequences. Measured on 2 threads,
math / fused step time (docs/training.md): the Multi30k model (d_model 256, 4 heads, batches of
260 x 14-15 tokens) 0.77 in bf16 and 1.00 in fp32; the lab's d_model-128 model 0.73; parsing's
shapes (60 x 30 source, 65 target tokens, 4 layers) 0.84; 16 x 128 source, 256 target tokens 1.14.

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
