"""The pre-softmax projection at a decoding step, into a buffer of its own. Not in the paper: a speed measure.

At every step the logits are N x V floats, tens of MiB at beam 4 and batch 32 with a large vocabulary. A fresh
tensor each step costs an allocation and its page faults; this module writes them into one buffer that it owns
and rewrites at the next step, and adds the bias in place. The step turns them into log-probabilities in the same
buffer (`TransformerStep.step`): whoever keeps the
log-probabilities of a step must copy them before the next one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model import OutputProjection


class LogitsBuffer:
    """A (rows, V) float32 buffer that grows to the largest batch asked for."""

    def __init__(self) -> None:
        self.buffer: Tensor | None = None

    def rows(self, n: int, vocab: int, device: torch.device) -> Tensor:
        b = self.buffer
        if b is None or b.size(0) < n or b.size(1) != vocab or b.device != device:
            self.buffer = b = torch.empty(n, vocab, dtype=torch.float32, device=device)  # whatever the default dtype
        return b[:n]


class BufferedProjection(nn.Module):
    """OutputProjection (§3.4) whose logits for (N, D) inputs are written into a reused buffer."""

    def __init__(self, projection: OutputProjection):
        super().__init__()
        self.projection = projection  # keeps its matrix (tied: the embedding's), read at every call
        self.logits = LogitsBuffer()

    @property
    def matrix(self) -> Tensor:
        return self.projection.matrix

    def forward(self, hidden: Tensor, bias: Tensor | None = None) -> Tensor:
        weight = self.projection.matrix  # (V, D)
        if hidden.dim() != 2 or hidden.dtype != weight.dtype or weight.dtype != torch.float32:
            return self.projection(hidden, bias)  # teacher-forced or half precision: a tensor of its own
        out = self.logits.rows(hidden.size(0), weight.size(0), hidden.device)
        torch.mm(hidden, weight.t(), out=out)  # then the bias in place: faster than addmm's broadcast copy
        return out if bias is None else out.add_(bias)
