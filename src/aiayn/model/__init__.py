"""The Transformer model (§3)."""

from .attention import KeyValue, KVCache, MultiHeadAttention, scaled_dot_product_attention
from .embedding import sinusoid_table
from .masks import causal_mask, padding_mask
from .transformer import Attention, DecoderState, Output, Transformer

__all__ = [
    "Attention", "DecoderState", "KVCache", "KeyValue", "MultiHeadAttention", "Output", "Transformer",
    "causal_mask", "padding_mask", "scaled_dot_product_attention", "sinusoid_table",
]
