"""The position-wise feed-forward network (eq. 2) and the encoder and decoder layers (§3.1).

Every sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))): post-norm, as in the paper,
with dropout on each sub-layer's output before the residual addition (§5.4).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig, StackShape
from .attention import KeyValue, MultiHeadAttention, SelfAttentionCache

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, eq. (2); the activation is configurable for Marian."""

    def __init__(self, config: ModelConfig, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, d_ff)  # W_1, b_1
        self.fc2 = nn.Linear(d_ff, config.d_model)  # W_2, b_2
        self.activation = ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.p_ffn_drop)  # not in the paper; 0 by default

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


def attention(config: ModelConfig, stack: StackShape) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, stack.heads, stack.d_k, stack.d_v, config.p_attn_drop)


class EncoderLayer(nn.Module):
    """Self-attention, then the FFN, each as LayerNorm(x + Dropout(Sublayer(x))) (§3.1)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attn = attention(config, config.encoder)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config, config.encoder.d_ff)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.p_drop)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), mask (B, 1, 1, S) -> (B, S, D) and, on request, weights (B, h, S, S)."""
        a, weights = self.self_attn(x, self.self_attn.project_kv(x), mask, need_weights)
        x = self.self_attn_layer_norm(x + self.dropout(a))
        x = self.final_layer_norm(x + self.dropout(self.ffn(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN (§3.1), each post-norm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        D, eps = config.d_model, config.layer_norm_eps
        self.self_attn = attention(config, config.decoder)
        self.self_attn_layer_norm = nn.LayerNorm(D, eps=eps)
        self.cross_attn = attention(config, config.decoder)
        self.cross_attn_layer_norm = nn.LayerNorm(D, eps=eps)
        self.ffn = FeedForward(config, config.decoder.d_ff)
        self.final_layer_norm = nn.LayerNorm(D, eps=eps)
        self.dropout = nn.Dropout(config.p_drop)

    def forward(
        self,
        y: Tensor,
        memory_kv: KeyValue,
        self_mask: Tensor | None,
        cross_mask: Tensor,
        cache: SelfAttentionCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, tuple[Tensor | None, Tensor | None]]:
        """y (B, T, D) are the newest T target positions; cache holds the keys/values of earlier ones.

        memory_kv are the encoder output's keys/values for this layer, (B, h, S, d_k), computed once;
        y may hold K hypotheses per sentence, (B*K, T, D), as in beam search.
        Returns the new y (y's keys/values are appended to cache) and on request the weights
        (B, h, T, t) of self-attention and (B, h, T, S) of cross-attention.
        """
        kv = self.self_attn.project_kv(y)
        if cache is not None:
            kv = cache.append(kv)  # (B, h, t, d_k): all positions so far
        a, w_self = self.self_attn(y, kv, self_mask, need_weights)
        y = self.self_attn_layer_norm(y + self.dropout(a))
        # With beams, the K hypotheses of a sentence share its memory: they attend as K x T query positions.
        B = memory_kv.k.size(0)
        c, w_cross = self.cross_attn(y.reshape(B, -1, y.size(-1)), memory_kv, cross_mask, need_weights)
        y = self.cross_attn_layer_norm(y + self.dropout(c.view_as(y)))
        y = self.final_layer_norm(y + self.dropout(self.ffn(y)))
        return y, (w_self, w_cross)
