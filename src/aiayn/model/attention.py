"""Scaled dot-product attention (eq. 1) and multi-head attention (§3.2.2).

Dimension legend: B batch, h heads, T query positions, S key positions, D d_model, d_k = D / h.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig


class KeyValue(NamedTuple):
    """Projected keys and values of one attention, split into heads: (B, h, S, d_k) each."""

    k: Tensor
    v: Tensor

    def index_select(self, index: Tensor) -> KeyValue:
        """Rows of the batch, e.g. to reorder beams or drop finished sentences."""
        return KeyValue(self.k.index_select(0, index), self.v.index_select(0, index))


class KVCache:
    """A decoder layer's self-attention keys and values of the positions so far, written in place.

    The buffers are time-major, (capacity, N, h, d_k), so positions 0..t-1 form one contiguous
    block: appending writes one slab and reordering hypotheses copies only the filled block. The
    capacity doubles when full; on a CPU, pages past t are never touched.
    """

    def __init__(self, k: Tensor, v: Tensor, length: int = 0):
        self.k, self.v, self.length = k, v, length  # (capacity, N, h, d_k) each

    @classmethod
    def empty(cls, like: Tensor, rows: int, capacity: int) -> KVCache:
        """A cache for rows hypotheses; like (N, h, T, d_k) gives the head sizes, dtype and device."""
        shape = (capacity, rows, like.size(1), like.size(3))
        return cls(like.new_empty(shape), like.new_empty(shape))

    def append(self, new: KeyValue) -> KeyValue:
        """Write new (N, h, T, d_k) after the cached positions; return all of them, (N, h, t, d_k) views."""
        start, end = self.length, self.length + new.k.size(2)
        if end > self.k.size(0):  # grow by doubling (a GPU commits all it allocates)
            capacity = max(end, 2 * self.k.size(0))
            for name in ("k", "v"):
                old = getattr(self, name)
                grown = old.new_empty((capacity, *old.shape[1:]))
                grown[:start] = old[:start]
                setattr(self, name, grown)
        self.k[start:end] = new.k.permute(2, 0, 1, 3)
        self.v[start:end] = new.v.permute(2, 0, 1, 3)
        self.length = end
        return KeyValue(self.k[:end].permute(1, 2, 0, 3), self.v[:end].permute(1, 2, 0, 3))


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(d_k)) V, eq. (1); masked scores are -inf before the softmax (§3.2.3).

    q (B, h, T, d_k); k, v (B, h, S, d_k); mask broadcastable to (B, h, T, S), True = may attend.
    Without `need_weights` this is PyTorch's fused kernel; with it, the same formula written out,
    so the returned weights (B, h, T, S) are the ones that produced the output.

    The written-out formula also serves one query per row over 32 or more rows on a CPU (decoder
    self-attention over its cache, §3.2.3). Not in the paper, a speed measure: there its two batched
    products are 20-45% faster than the fused kernel, which sets up every (row, head) pair on its
    own (3-5% less time per sentence at beam 4, batch 32; no change greedy). With fewer rows, or
    several masked queries (encoder-decoder attention), the fused kernel is the faster one.
    """
    one_query = mask is None and q.size(2) == 1 and q.size(0) >= 32 and q.device.type == "cpu"
    if not need_weights and not one_query:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, dropout_p) @ v  # (B, h, T, d_k)
    return out, weights if need_weights else None


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    One class serves the three uses of §3.2.3: encoder self-attention, masked decoder
    self-attention and encoder-decoder attention. Keys and values are projected by `project_kv`,
    so a decoder can compute the encoder's once and cache its own (§3.2.3, incremental decoding).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        D = config.d_model
        self.n_heads = config.n_heads
        self.p_attn_drop = config.p_attn_drop
        self.q_proj = nn.Linear(D, D)  # W^Q for all heads at once
        self.k_proj = nn.Linear(D, D)  # W^K
        self.v_proj = nn.Linear(D, D)  # W^V
        self.out_proj = nn.Linear(D, D)  # W^O

    def split_heads(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        return x.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)  # (B, h, T, d_k)

    def merge_heads(self, x: Tensor) -> Tensor:
        B, h, T, d_k = x.shape
        return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, D)

    def project_kv(self, x: Tensor) -> KeyValue:
        """Keys and values of the positions in x (B, S, D)."""
        return KeyValue(self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x)))

    def project_qkv(self, x: Tensor) -> tuple[Tensor, KeyValue]:
        """Self-attention: queries, keys and values of x (B, T, D) in one matrix product."""
        fused = getattr(self, "qkv_proj", None)  # W^Q, W^K, W^V as one layer (int8, aiayn.decode.quantize)
        if fused is not None:
            q, k, v = fused(x).chunk(3, dim=-1)
            return self.split_heads(q), KeyValue(self.split_heads(k), self.split_heads(v))
        if not torch.is_grad_enabled() or not isinstance(self.q_proj, nn.Linear):
            # inference (or int8 modules): three products, without copying the weights together
            return self.split_heads(self.q_proj(x)), self.project_kv(x)
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])  # (3D, D)
        bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        q, k, v = F.linear(x, weight, bias).chunk(3, dim=-1)  # (B, T, D) each
        return self.split_heads(q), KeyValue(self.split_heads(k), self.split_heads(v))

    def attend(
        self, q: Tensor, kv: KeyValue, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of split queries q (B, h, T, d_k) over kv, then W^O: (B, T, D)."""
        p = self.p_attn_drop if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, kv.k, kv.v, mask, p, need_weights)
        return self.out_proj(self.merge_heads(out)), weights

    def forward(
        self, x: Tensor, kv: KeyValue, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x (B, T, D) attend over already projected keys/values kv."""
        return self.attend(self.split_heads(self.q_proj(x)), kv, mask, need_weights)
