"""Training's float32 matrix products on MKL or oneDNN. Not in the paper: a speed measure.

Every linear layer goes through `F.linear`, which PyTorch's CPU build runs on MKL's sgemm; the
pre-softmax projection is multiplied inside the training loss (cpu/fused_loss.py), which takes the
same backend by name. On some hosts oneDNN, which PyTorch also ships, multiplies the same
float32 shapes much faster (decoding's case: aiayn.cpu.backend; the rates of both are printed
by benchmarks/gemm.py). Under `products("onednn")` each float32 `F.linear` on a CPU runs its
forward product and the input's gradient on oneDNN, and the weight's gradient on MKL (its
transposed operand would cost oneDNN a copy of the whole output gradient). The model code is
unchanged: a TorchFunctionMode catches the calls. Under bf16 autocast nothing changes, since
PyTorch already multiplies bf16 on oneDNN.

train.gemm picks "mkl", "onednn", or "auto": oneDNN where it is clearly faster, measured once at a
run's start on the model's own shapes (forward and backward, well under a second of products);
MKL where oneDNN gains under 10%, and without measuring where the measured products would be
under 1 GFLOP (tiny models, whose timings are noise), so that fresh runs of one recipe on one host
choose alike. Rank 0's
choice on every rank. The choice is kept in the run's checkpoints, so a resumed run computes what
the uninterrupted one did; AIAYN_GEMM (or train.gemm) forces one, as AIAYN_GEMM does for decoding.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from ..config import ModelConfig
from .backend import LAYER_BACKENDS as BACKENDS
from .backend import best_seconds, forced, layers_of, onednn_available, onednn_linear, rank_zero_choice

CHOICES = ("auto", *BACKENDS)
MIN_GAIN = 1.10  # auto takes oneDNN only when MKL takes at least this much longer
MIN_FLOP = 1e9  # and only for models whose measured products are at least this many


class _OneDnnLinear(torch.autograd.Function):
    """y = x W^T + b with the forward product and dL/dx on oneDNN, dL/dW on MKL."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return onednn_linear(x, weight, bias)  # (..., out)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_linear(grad.contiguous(), weight.t(), None)  # (..., in) = grad W; W^T a view, read as is
        rows = grad.reshape(-1, grad.size(-1))  # (R, out)
        if ctx.needs_input_grad[1]:
            grad_w = rows.t() @ x.reshape(-1, x.size(-1))  # (out, in), MKL
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = rows.sum(0)
        return grad_x, grad_w, grad_b


class _OneDnnProducts(TorchFunctionMode):
    """Sends every float32 CPU F.linear outside autocast to _OneDnnLinear."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight = args[0], args[1] if len(args) > 1 else kwargs["weight"]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if (
                x.device.type == "cpu"
                and x.dtype == weight.dtype == torch.float32
                and not torch.is_autocast_enabled("cpu")
            ):
                return _OneDnnLinear.apply(x, weight, bias)
        return func(*args, **kwargs)


def products(backend: str) -> contextlib.AbstractContextManager:
    """A context in which the model's linear layers multiply on `backend` ("mkl" or "onednn"): wrap the forward in it."""
    return _OneDnnProducts() if backend == "onednn" else contextlib.nullcontext()


def measured_flop(config: ModelConfig, rows: int = 1024) -> float:
    """FLOPs of one `measure` run: a forward and two backward products per matrix."""
    return 3 * 2 * rows * config.d_model * (config.decoder.d_ff + min(config.target_vocab_size, 8192))


def measure(config: ModelConfig, rows: int = 1024, repeats: int = 2) -> dict[str, float]:
    """Seconds for one FFN product and a slice of the projection, forward and backward, on each backend.

    Random matrices of the model's widths (rates depend on shapes, not values): (rows, d_model)
    times W_1 (d_ff, d_model), and times up to 8,192 rows of the vocabulary.
    """
    generator = torch.Generator().manual_seed(0)
    D, Fw, V = config.d_model, config.decoder.d_ff, min(config.target_vocab_size, 8192)
    x = torch.randn(rows, D, generator=generator, requires_grad=True)
    weights = [torch.randn(n, D, generator=generator, requires_grad=True) for n in (Fw, V)]

    def run() -> None:
        for w in weights:
            F.linear(x, w).sum().backward()

    seconds = {}
    for name in BACKENDS if onednn_available() else ("mkl",):
        with products(name):
            seconds[name] = best_seconds(run, repeats)
    return seconds


def choose(
    option: str,
    config: ModelConfig,
    device: torch.device,
    dtype: torch.dtype | None,
    kept: str = "",
    compiled: bool = False,
) -> str:
    """The backend of a run: forced (train.gemm, AIAYN_GEMM), else the one its checkpoints kept, else measured.

    Off a CPU, under autocast or torch.compile, "mkl" (nothing to choose: F.linear is left alone). Every rank of a
    torch.distributed job gets rank 0's answer.
    """
    if option not in CHOICES:
        raise ValueError(f"train.gemm: {option!r} is not one of {', '.join(CHOICES)}")
    if device.type != "cpu" or dtype is not None or compiled:
        return "mkl"
    name = forced(option, decoding=False)
    name = layers_of(name) if name else kept or None  # AIAYN_GEMM=mkl+packed: decoding's packed vocabulary; MKL here
    if name is None and measured_flop(config) < MIN_FLOP:
        name = "mkl"
    if name is None:
        seconds = measure(config)
        name = "onednn" if seconds.get("onednn", float("inf")) * MIN_GAIN <= seconds["mkl"] else "mkl"
    return rank_zero_choice(name)
