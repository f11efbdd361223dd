"""FLOPs of the training steps' matrix products, counted from the shapes of the padded batches.

A multiply-add is 2 FLOPs; the backward pass costs twice the forward pass, so a training step
is 3x the forward FLOPs. Layer norms, softmaxes and the like are left out (a few percent), and
padded positions are counted as the hardware computes them. This is not Table 2's number: the
paper estimates training cost as training time x number of GPUs x an assumed sustained
single-precision FLOP/s per GPU (results.json's device_seconds times that rate gives it).
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
