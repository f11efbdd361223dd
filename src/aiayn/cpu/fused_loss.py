"""The training step's loss on a CPU: §5.4's label-smoothed cross-entropy fused with the pre-softmax projection
(§3.4) over one logits table kept from step to step. Not in the paper: the same function as projecting and then
`aiayn.train.loss.label_smoothed_nll` (tests/test_train.py holds them equal), in less memory and time.

The logits table is taken a few MiB of rows at a time, upcast to float32 there, so that each pass over it runs in
cache; its gradient is written over it in place; the products run on the run's backend (train_gemm).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..smoothing import row_chunks, smoothed_gradient, smoothed_sums
from .backend import onednn_linear

PRODUCT_ROWS = 256  # rows of the projection multiplied at once on a CPU, straight into the kept table
ONEDNN_BLOCK_BYTES = 24 << 20  # oneDNN's products come back fresh: blocks under glibc's 32 MiB mmap limit, reused


class KeptTable:
    """One (N, V) logits table per device and dtype, kept from step to step and grown when a batch needs more.

    A fresh table of a base-size batch is about a gigabyte of float32 that the kernel would map page by page at
    every step, and once more for its gradient (docs/studies/training-speed.md). Written over at each call;
    `dtype` is the last table's.
    """

    def __init__(self) -> None:
        self._flat: dict[tuple[torch.device, torch.dtype], Tensor] = {}
        self.dtype: torch.dtype | None = None

    def table(self, n: int, v: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        key = (device, dtype)
        flat = self._flat.get(key)
        if flat is None or flat.numel() < n * v:
            self._flat.pop(key, None)  # the old one goes before the larger one is made
            flat = self._flat[key] = torch.empty(n * v, dtype=dtype, device=device)
        self.dtype = dtype
        return flat[: n * v].view(n, v)  # (N, V)


class _ProjectedSmoothedNLL(torch.autograd.Function):
    """label_smoothed_nll(h W^T + b) with the logits, then their gradient, written over one kept table.

    The forward pass multiplies h (N, D) by W (V, D) into the table, takes the loss from it (`smoothed_sums`:
    each row's logsumexp and mean, a chunk of rows at a time), and then (when a gradient is wanted) writes
    softmax(z) - q over the logits in place, row chunk by row chunk; the backward pass only multiplies that
    table by W and by h, and scales the two products by the incoming gradient. The same three matrix products as
    F.linear + label_smoothed_nll, with no fresh table for the logits, their log-probabilities or their gradient.
    The table is saved for backward: a later forward that writes over it before this backward makes
    autograd refuse the stale table ("modified by an inplace operation") rather than use it.
    """

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        target: Tensor,
        epsilon: float,
        pad_id: int,
        dtype: torch.dtype | None,
        backend: str,
        kept: KeptTable,
    ) -> tuple[Tensor, Tensor]:
        dtype = dtype or hidden.dtype  # autocast's dtype of the products, or the model's own
        h, w = hidden.to(dtype), weight.to(dtype)  # (N, D), (V, D)
        b = bias.to(dtype) if bias is not None else None  # (V,)
        table = kept.table(h.size(0), w.size(0), dtype, h.device)  # (N, V)
        onednn = backend == "onednn" and h.device.type == "cpu" and dtype == torch.float32
        step = h.size(0)  # rows multiplied at once: all of them off a CPU
        if h.device.type == "cpu":  # oneDNN returns a fresh block, then copied: one the heap can hand back each time
            step = max(1, ONEDNN_BLOCK_BYTES // (4 * w.size(0))) if onednn else PRODUCT_ROWS
        for i in range(0, h.size(0), step):
            rows = slice(i, i + step)
            if onednn:  # train.gemm's backend (cpu/train_gemm.py)
                table[rows] = onednn_linear(h[rows], w, b)
            elif b is None:
                torch.mm(h[rows], w.t(), out=table[rows])
            else:
                torch.addmm(b, h[rows], w.t(), out=table[rows])
        loss, nll_sum, lse, keep = smoothed_sums(table, target, epsilon, pad_id)
        ctx.mark_non_differentiable(nll_sum)
        ctx.onednn = onednn
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        if any(ctx.needs_input_grad[:3]):
            for rows in row_chunks(table):  # dL/dz over the logits: in place for float32, rounded once for bf16
                g = smoothed_gradient(table[rows], lse[rows], target[rows], epsilon, in_place=True)
                g.mul_(keep[rows, None])
                if g.dtype != table.dtype:
                    table[rows] = g
            ctx.save_for_backward(h, w, table)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        h, w, grad = ctx.saved_tensors  # grad: the table, now dL/dz of a unit loss (N, V)
        bias_dtype = ctx.dtypes[2]  # None without a bias
        grad_h = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            # oneDNN reads W^T as a view of W (V, D): no transposed copy of the vocabulary's matrix
            grad_h = onednn_linear(grad, w.t(), None) if ctx.onednn else torch.mm(grad, w)  # (N, D)
        if ctx.needs_input_grad[1]:
            grad_w = torch.mm(grad.t(), h)  # (V, D), MKL for either backend, as cpu/train_gemm.py does
        if bias_dtype is not None and ctx.needs_input_grad[2]:
            grad_b = grad.float().sum(0)  # (V,)
        # scaled in float32 (a bf16 product is rounded once, as autograd's cast back did), in the inputs' dtypes
        grads = [
            g.float().mul_(grad_loss.float()).to(dtype) if g is not None else None
            for g, dtype in zip((grad_h, grad_w, grad_b), ctx.dtypes)
        ]
        return (*grads, None, None, None, None, None, None)


def projected_smoothed_nll(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    target: Tensor,
    epsilon: float,
    pad_id: int,
    kept: KeptTable,
    dtype: torch.dtype | None = None,
    backend: str = "mkl",
) -> tuple[Tensor, Tensor, int]:
    """label_smoothed_nll(F.linear(hidden, weight, bias), ...) for training, over a table kept in `kept`.

    hidden (B, T, D): the decoder's output (`model(src, tgt_in, project=False)`); weight (V, D) and bias
    (V,): the pre-softmax projection's (§3.4; `model.output_proj.matrix`, `model.logits_bias`). The
    products run in `dtype` (autocast's, None for the model's own) on `backend` (train.gemm). Call
    backward on the loss before the next call with the same `kept`: the table is written over.
    """
    with torch.autocast(hidden.device.type, enabled=False):  # the dtype is explicit here
        loss, nll = _ProjectedSmoothedNLL.apply(
            hidden.flatten(0, 1), weight, bias, target.flatten(), epsilon, pad_id, dtype, backend, kept
        )
    return loss, nll.detach(), int((target != pad_id).sum())
