"""Scaled dot-product attention, eq. (1), against PyTorch's fused kernel, with the paper's masks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from aiayn.cpu.query_attention import OneQueryAttention, SourceAttention
from aiayn.model import causal_mask, padding_mask, scaled_dot_product_attention


def test_written_out_attention_equals_pytorch_sdpa_with_masks():
    B, h, T, S, d_k = 3, 4, 5, 7, 16
    q, k, v = torch.randn(B, h, T, d_k), torch.randn(B, h, S, d_k), torch.randn(B, h, S, d_k)
    ids = torch.randint(4, 20, (B, S))
    ids[0, 5:] = 0
    ids[2, 1:] = 0
    mask = padding_mask(ids, pad_id=0) & causal_mask(T, S)  # (B, 1, T, S): padding and look-ahead
    out, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    fused, none = scaled_dot_product_attention(q, k, v, mask)
    assert none is None
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (out - reference).abs().max().item() < 1e-5
    assert (fused - reference).abs().max().item() == 0
    assert torch.allclose(weights.sum(-1), torch.ones(B, h, T), atol=1e-6)  # every row sums to 1
    assert torch.all(weights.masked_select(~mask.expand_as(weights)) == 0)  # masked weights exactly 0


def test_one_query_over_a_time_major_cache_equals_pytorch_sdpa():
    """Decoder self-attention at a step: 32+ rows read a (t, B, h, d_k) cache through strided views."""
    t, B, h, d_k = 9, 40, 4, 16
    cache_k, cache_v = torch.randn(t + 3, B, h, d_k), torch.randn(t + 3, B, h, d_k)
    k, v = cache_k[:t].permute(1, 2, 0, 3), cache_v[:t].permute(1, 2, 0, 3)  # (B, h, t, d_k) views
    q = torch.randn(B, 1, h * d_k).view(B, 1, h, d_k).transpose(1, 2)  # (B, h, 1, d_k)
    out, none = OneQueryAttention()(q, k, v, None)  # what decoding puts in the decoder's self-attention
    assert none is None
    assert (out - F.scaled_dot_product_attention(q, k, v)).abs().max().item() < 1e-5
    written, weights = scaled_dot_product_attention(q, k, v, None, need_weights=True)
    assert torch.equal(out, written)  # the written-out formula, as documented
    assert weights.shape == (B, h, 1, t)


@pytest.mark.parametrize("B, K", [(3, 4), (33, 1), (1, 1)])
def test_encoder_decoder_attention_at_a_step_equals_pytorch_sdpa(B, K):
    """A sentence's K hypotheses over its padded source: written out from 2 queries or 32 sentences, else fused."""
    h, S, d_k = 4, 11, 16
    q = torch.randn(B, K, h * d_k).view(B, K, h, d_k).transpose(1, 2)  # (B, h, K, d_k), as the layer splits it
    k, v = torch.randn(B, h, S, d_k), torch.randn(B, h, S, d_k)  # contiguous, as TransformerStep.start keeps them
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
    mask[::2, ..., S - 4 :] = False  # padding
    out, none = SourceAttention()(q, k, v, mask)
    assert none is None and out.shape == (B, h, K, d_k)
    assert (out - F.scaled_dot_product_attention(q, k, v, attn_mask=mask)).abs().max().item() < 1e-5
    if B >= 32 or K >= 2:  # the written-out formula, as documented
        assert torch.equal(out, scaled_dot_product_attention(q, k, v, mask, need_weights=True)[0])


def test_decoding_puts_its_attentions_in_the_decoder():
    from aiayn import ModelConfig, Transformer
    from aiayn.cpu.layout import for_decoding

    model = for_decoding(Transformer(ModelConfig.preset("tiny", vocab_size=50)))
    assert all(
        type(layer.self_attn.attention) is OneQueryAttention and type(layer.cross_attn.attention) is SourceAttention
        for layer in model.decoder.layers
    )


def test_eq1_by_hand_for_one_query():
    q = torch.tensor([[[[1.0, 0.0]]]])  # (1, 1, 1, 2)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = torch.tensor([[[[10.0, 0.0], [0.0, 10.0]]]])
    _, w = scaled_dot_product_attention(q, k, v, None, need_weights=True)
    e = math.exp(1 / math.sqrt(2))
    assert torch.allclose(w[0, 0, 0], torch.tensor([e / (e + 1), 1 / (e + 1)]))


def test_causal_mask_with_cached_prefix():
    assert causal_mask(3).squeeze().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    # Two new queries after three cached positions see everything up to themselves.
    assert causal_mask(2, 5).squeeze().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
