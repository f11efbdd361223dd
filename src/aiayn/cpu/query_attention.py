"""Attention at a decoding step, written for its shapes. Not in the paper: a speed measure.

At a step every row (hypothesis) has one query over its cached positions (decoder self-attention),
and every sentence has its K hypotheses' queries over its source (encoder-decoder attention, masked
at the source's padding). On a CPU, eq. (1) written out as two batched products is then faster than
PyTorch's fused kernel, which sets up every (row, head) pair on its own: for self-attention from 32
rows on, for encoder-decoder attention from 2 queries a sentence (beam search) or 32 sentences
(greedy). With fewer, the fused kernel is the faster and is kept. `for_decoding` puts these modules
in place of the decoder's `DotProductAttention`s; the maths is eq. (1) either way
(docs/studies/translation-speed.md has the measurements). Where aiayn's own kernels are built (`attend.py`), a step
on the CPU runs those instead (`CpuStep.uses_row_table`); these modules serve the rest.
"""

from __future__ import annotations

import math

from torch import Tensor

from ..model import DotProductAttention

# The written-out formula pays for itself from this many rows on; below it the fused kernel is kept.
MIN_ROWS_WRITTEN_OUT = 32
# Encoder-decoder attention at a step, (B, h, K, S) with a padding mask, is written out from this many queries a
# sentence (beams) on; one query a sentence keeps the fused kernel. The timings behind both thresholds:
# docs/studies/translation-speed.md.
MIN_QUERIES_WRITTEN_OUT = 2


def written_out(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V as two batched products, masked scores -inf (eq. 1, §3.2.3): (B, h, T, d_v)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill_(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


class OneQueryAttention(DotProductAttention):
    """Eq. (1); one unmasked query per row over many rows on a CPU takes the written-out formula."""

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        one_query = mask is None and q.size(2) == 1 and q.size(0) >= MIN_ROWS_WRITTEN_OUT and q.device.type == "cpu"
        if need_weights or not one_query or (self.training and self.p_drop > 0):
            return super().forward(q, k, v, mask, need_weights)
        return written_out(q, k, v, None), None  # (N, h, 1, d_v)


class SourceAttention(DotProductAttention):
    """Eq. (1) for encoder-decoder attention on a CPU: written out where a sentence has 2 or more queries
    (its hypotheses) or there are 32 or more sentences, else PyTorch's fused kernel."""

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        many = q.size(2) >= MIN_QUERIES_WRITTEN_OUT or q.size(0) >= MIN_ROWS_WRITTEN_OUT
        if need_weights or not many or q.device.type != "cpu" or (self.training and self.p_drop > 0):
            return super().forward(q, k, v, mask, need_weights)
        return written_out(q, k, v, mask), None  # (B, h, K, d_v)
