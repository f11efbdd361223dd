"""Dropout masks drawn faster on a CPU while training. Not in the paper: a speed measure.

Dropout (§5.4: P_drop on every sub-layer's output and on the embedding sums) keeps each element
with probability 1 - p and scales it by 1 / (1 - p). PyTorch's CPU kernel draws the mask one
element at a time through `bernoulli_`, a sizeable share of a small model's step on a CPU
(docs/studies/training-speed.md). Here the mask comes from 64-bit words
of the same generator, each cut into four 16-bit lanes of 15 random bits, and an element is kept
where its lane is at least round(p * 2^15): the drop probability is p to within 2^-16 (0.1 is
0.100006), and the scale is the exact inverse of the keep probability, so the expected output is
still the input. `fast_dropout()` is a context around the forward pass that catches the model's
F.dropout calls (every nn.Dropout) on CPU tensors; the model code is unchanged. Dropout on the
attention weights (p_attn_drop, off by default) happens inside PyTorch's attention kernel and is
left to it.
It draws from torch's default generator, which the checkpoints save, so a resumed run is exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

LANE = 1 << 15  # random values per 16-bit lane


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[Tensor, float]:
    """A boolean mask keeping each element with probability about 1 - p, and the scale 1 / P(keep)."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()  # 63 random bits each
    lanes = words.view(torch.int16)[:n].view(shape).bitwise_and_(LANE - 1)  # (shape) uniform in [0, 2^15)
    threshold = round(p * LANE)
    return lanes >= threshold, LANE / (LANE - threshold)


class _Dropout(torch.autograd.Function):
    """x * mask * scale, and the gradient through the same mask."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        keep, scale = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep * scale

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None


def dropout(x: Tensor, p: float) -> Tensor:
    """Training-time dropout of x with the mask above (0 < p < 1)."""
    return _Dropout.apply(x, p)


class _FastDropout(TorchFunctionMode):
    """Sends every training-time, out-of-place F.dropout of a CPU tensor to `dropout` where p is more than 0 and less
    than 1 at the lanes' resolution; PyTorch's own dropout does the rest."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            x = args[0] if args else kwargs["input"]
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            training = args[2] if len(args) > 2 else kwargs.get("training", True)
            inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
            if training and not inplace and 0 < round(p * LANE) < LANE and x.device.type == "cpu":
                return dropout(x, p)
        return func(*args, **kwargs)


def fast_dropout() -> _FastDropout:
    """A context in which the model's dropout on CPU tensors draws its masks as above: wrap the forward in it."""
    return _FastDropout()
