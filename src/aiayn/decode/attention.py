"""Decoder self-attention at a decoding step, written for its shape. Not in the paper: a speed measure.

At a step every row (hypothesis) has one query over its cached positions. On a CPU with many
rows, eq. (1) written out as two batched products is faster than PyTorch's fused kernel, which
sets up every (row, head) pair on its own; with few rows, or several masked queries (as in
encoder-decoder attention at a step), the fused kernel is the faster. `for_decoding` puts this
module in place of the decoder self-attention's `DotProductAttention`; the maths is eq. (1) either
way (docs/translation.md has the measurements).
"""

from __future__ import annotations

import math

from torch import Tensor

from ..model import DotProductAttention

# The written-out formula pays for itself from this many rows on (measured on 2-core AVX-512 CPUs at
# beam 4; docs/translation.md). Below it the fused kernel is kept.
MIN_ROWS_WRITTEN_OUT = 32


class OneQueryAttention(DotProductAttention):
    """Eq. (1); one unmasked query per row over many rows on a CPU takes the written-out formula."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        one_query = mask is None and q.size(2) == 1 and q.size(0) >= MIN_ROWS_WRITTEN_OUT and q.device.type == "cpu"
        if need_weights or not one_query or (self.training and self.p_drop > 0):
            return super().forward(q, k, v, mask, need_weights)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (N, h, 1, t)
        return scores.softmax(dim=-1) @ v, None  # (N, h, 1, d_v)
