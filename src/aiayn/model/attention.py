"""Scaled dot-product attention (eq. 1) and multi-head attention (§3.2.2).

Dimension legend: B batch, h heads, T query positions, S key positions, D d_model, d_k and d_v the
sizes of one head's queries/keys and values (d_model / h unless the configuration sets them).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class KeyValue(NamedTuple):
    """Projected keys and values of one attention, split into heads: (B, h, S, d_k) and (B, h, S, d_v)."""

    k: Tensor
    v: Tensor

    def index_select(self, index: Tensor) -> KeyValue:
        """Rows of the batch, e.g. to reorder beams or drop finished sentences."""
        return KeyValue(self.k.index_select(0, index), self.v.index_select(0, index))


class SelfAttentionCache(Protocol):
    """What incremental decoding keeps of one decoder layer's self-attention: the earlier positions' keys/values."""

    length: int  # positions cached so far

    def append(self, new: KeyValue) -> KeyValue:
        """Store new (N, h, T, d) after the cached positions; return all of them, (N, h, length, d)."""


class ConcatCache:
    """The plainest SelfAttentionCache: the history concatenated step by step (aiayn.decode has a faster one)."""

    def __init__(self) -> None:
        self.kv: KeyValue | None = None

    @property
    def length(self) -> int:
        return 0 if self.kv is None else self.kv.k.size(2)

    def append(self, new: KeyValue) -> KeyValue:
        old = self.kv
        self.kv = new if old is None else KeyValue(torch.cat([old.k, new.k], 2), torch.cat([old.v, new.v], 2))
        return self.kv


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float = 0.0, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(d_k)) V, eq. (1); masked scores are -inf before the softmax (§3.2.3).

    q (B, h, T, d_k), k (B, h, S, d_k), v (B, h, S, d_v); mask broadcastable to (B, h, T, S), True =
    may attend. Without `need_weights` this is PyTorch's fused kernel; with it, the same formula
    written out, so the returned weights (B, h, T, S) are the ones that produced the output.
    """
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return F.dropout(weights, dropout_p) @ v, weights  # (B, h, T, d_v)


class DotProductAttention(nn.Module):
    """Eq. (1) as a module, with dropout on the weights while training (not in the paper; 0 by default)."""

    def __init__(self, p_drop: float = 0.0):
        super().__init__()
        self.p_drop = p_drop

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        return scaled_dot_product_attention(q, k, v, mask, self.p_drop if self.training else 0.0, need_weights)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    One class serves the three uses of §3.2.3: encoder self-attention, masked decoder
    self-attention and encoder-decoder attention. Keys and values are projected by `project_kv`,
    so a decoder can compute the encoder's once and cache its own (incremental decoding).
    """

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int, p_attn_drop: float = 0.0):
        super().__init__()
        self.heads, self.d_k, self.d_v = heads, d_k, d_v
        self.q_proj = nn.Linear(d_model, heads * d_k)  # W^Q of all heads at once
        self.k_proj = nn.Linear(d_model, heads * d_k)  # W^K
        self.v_proj = nn.Linear(d_model, heads * d_v)  # W^V
        self.out_proj = nn.Linear(heads * d_v, d_model)  # W^O
        self.attention = DotProductAttention(p_attn_drop)

    def split_heads(self, x: Tensor, d: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.heads, d).transpose(1, 2)  # (B, T, h*d) -> (B, h, T, d)

    def merge_heads(self, x: Tensor) -> Tensor:
        B, h, T, d = x.shape
        return x.transpose(1, 2).reshape(B, T, h * d)  # (B, T, h*d_v)

    def query(self, x: Tensor) -> Tensor:
        """Queries of x (B, T, D), split into heads: (B, h, T, d_k)."""
        return self.split_heads(self.q_proj(x), self.d_k)

    def project_kv(self, x: Tensor) -> KeyValue:
        """Keys and values of the positions in x (B, S, D)."""
        return KeyValue(self.split_heads(self.k_proj(x), self.d_k), self.split_heads(self.v_proj(x), self.d_v))

    def attend(
        self, q: Tensor, kv: KeyValue, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of split queries q (B, h, T, d_k) over kv, then W^O: (B, T, D)."""
        out, weights = self.attention(q, kv.k, kv.v, mask, need_weights)
        return self.out_proj(self.merge_heads(out)), weights

    def forward(
        self, x: Tensor, kv: KeyValue, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x (B, T, D) attend over already projected keys/values kv."""
        return self.attend(self.query(x), kv, mask, need_weights)
