"""Training FLOPs, counted from the matrix products, as Table 2 estimates a model's training cost.

A multiply-add is 2 FLOPs; the backward pass costs twice the forward pass, so a training step
is 3x the forward FLOPs. Layer norms, softmaxes and the like are left out (a few percent).
"""

from __future__ import annotations

from ..config import ModelConfig


def forward_flops(config: ModelConfig, B: int, S: int, T: int) -> float:
    """Forward FLOPs of one padded batch: B sentences, S source and T target positions."""
    D, F = config.d_model, config.d_ff
    encoder = config.n_layers * B * S * (2 * 4 * D * D + 2 * 2 * D * F + 2 * 2 * S * D)
    decoder_self = B * T * (2 * 4 * D * D + 2 * 2 * T * D)
    decoder_cross = B * T * (2 * 2 * D * D + 2 * 2 * S * D) + B * S * 2 * 2 * D * D
    decoder = config.decoder_layers * (decoder_self + decoder_cross + B * T * 2 * 2 * D * F)
    output = B * T * 2 * D * config.target_vocab_size
    return float(encoder + decoder + output)


def train_flops(config: ModelConfig, B: int, S: int, T: int) -> float:
    """Forward plus backward (twice the forward)."""
    return 3.0 * forward_flops(config, B, S, T)
