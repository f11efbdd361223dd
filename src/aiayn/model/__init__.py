"""The Transformer model (§3): Figure 1 and nothing else; decoding's machinery lives in aiayn.decode."""

from .attention import (
    ConcatCache,
    DotProductAttention,
    KeyValue,
    MultiHeadAttention,
    SelfAttentionCache,
    scaled_dot_product_attention,
)
from .embedding import OutputProjection, sinusoid_table
from .masks import causal_mask, padding_mask
from .transformer import Attention, Output, Transformer

__all__ = [
    "Attention",
    "ConcatCache",
    "DotProductAttention",
    "KeyValue",
    "MultiHeadAttention",
    "Output",
    "OutputProjection",
    "SelfAttentionCache",
    "Transformer",
    "causal_mask",
    "padding_mask",
    "scaled_dot_product_attention",
    "sinusoid_table",
]
