"""The decoder at one new position, as a decoding step runs it. Not in the paper: a speed measure.

`Transformer.decode_step` runs the decoder's modules as written for training: (B, T, D) tensors, the
multi-head wrappers of §3.2.2, a dropout call after every sub-layer. At a step of batch 1 the
products read every weight once and the rest is the cost of calling small operations, the wrappers among
them (docs/studies/translation-speed.md, "The decoder step without its wrappers"). `decode_step` below is
the same maths on (N, D) rows: the same modules'
products and attentions, the heads as views, no dropout (identity in eval), the residual added in
place. Its logits equal `Transformer.decode_step`'s (tests/test_layer_step.py).

Dimension legend: B sentences, K hypotheses each, N = B x K rows, h heads of d_k (queries, keys) and
d_v (values), D = d_model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.ao.nn.quantized import dynamic as quantized

from ..model import KeyValue, Transformer
from ..model.attention import MultiHeadAttention, SelfAttentionCache
from ..model.layers import DecoderLayer, FeedForward
from ..model.transformer import Decoder
from . import attend
from .backend import OneDnnLinear
from .gemv import GemvLinear

# The FFN's activation in place, where it has an in-place form (relu, swish) and W_1's product returns a tensor of
# its own (these modules do): a fresh (N, d_ff) tensor would cost more than the activation itself
# (docs/studies/translation-speed.md, "The FFN's activation in place").
IN_PLACE = {F.relu: F.relu_, F.silu: lambda x: F.silu(x, inplace=True)}
OWN_OUTPUT = (nn.Linear, OneDnnLinear, GemvLinear, quantized.Linear)


def fits(model: Transformer) -> bool:
    """Whether model's decoder is made of exactly the modules whose forward `decode_step` repeats (Decoder,
    DecoderLayer, MultiHeadAttention, FeedForward, LayerNorm), with no hooks on them (nor global ones) and no
    forward of their own, and none of them or the dropouts it skips training. The modules it calls (products,
    attentions, embeddings) may be any, and run as they are; checked once per step model."""
    decoder = model.decoder
    expected = [(decoder, Decoder), (decoder.dropout, nn.Dropout)]
    for layer in decoder.layers:
        expected += [
            (layer, DecoderLayer),
            (layer.dropout, nn.Dropout),
            (layer.self_attn, MultiHeadAttention),
            (layer.cross_attn, MultiHeadAttention),
            (layer.ffn, FeedForward),
            (layer.ffn.dropout, nn.Dropout),
        ]
        expected += [
            (norm, nn.LayerNorm)
            for norm in (layer.self_attn_layer_norm, layer.cross_attn_layer_norm, layer.final_layer_norm)
        ]
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return False  # hooks on every module (torch.nn.modules.module.register_module_forward_hook)
    return all(
        type(module) is kind
        and "forward" not in vars(module)
        and not module.training
        and not module._forward_hooks
        and not module._forward_pre_hooks
        for module, kind in expected
    )


def applies(model: Transformer, tokens: Tensor) -> bool:
    """Whether `decode_step` computes model.decode_step(tokens, ...) for a model that `fits`: one new position, not training."""
    return tokens.size(1) == 1 and not model.training


def decode_step(
    model: Transformer,
    tokens: Tensor,
    memory_kv: list[KeyValue],
    src_mask: Tensor,
    caches: Sequence[SelfAttentionCache],
) -> Tensor:
    """tokens (N, 1) -> logits (N, V) of the next token; each cache is given the new position (§3.2.3)."""
    decoder = model.decoder
    y = decoder.embed(tokens[:, 0]) + decoder.positions(1, caches[0].length)  # (N, D)
    # Caches with a row table were made for aiayn's own attention kernels (`CpuStep.uses_row_table`), which
    # take float32: under autocast the products give bfloat16, and the caches are read through their table instead.
    through_table = getattr(caches[0], "table", None) is not None and not torch.is_autocast_enabled("cpu")
    for layer, kv, cache in zip(decoder.layers, memory_kv, caches, strict=True):
        y = layer_step(layer, y, kv, src_mask, cache, through_table)
    return model.project(y)


def layer_step(
    layer: DecoderLayer,
    y: Tensor,
    memory_kv: KeyValue,
    src_mask: Tensor,
    cache: SelfAttentionCache,
    through_table: bool = False,
) -> Tensor:
    """`DecoderLayer.forward` at one position: y (N, D) -> (N, D), each sub-layer LayerNorm(y + Sublayer(y)) (§3.1);
    through_table: both attentions on `attend.c` (cache a `state.KVBuffer` with a row table), else on the layer's modules."""
    N, _ = y.shape
    attn = layer.self_attn
    h, d_k, d_v = attn.heads, attn.d_k, attn.d_v
    new = KeyValue(attn.k_proj(y).view(N, h, 1, d_k), attn.v_proj(y).view(N, h, 1, d_v))
    q = attn.q_proj(y).view(N, h, d_k)
    if through_table:
        cache.write(new)
        out = attend.attend(q, cache.k, cache.v, cache.table.rows, cache.length)  # (N, h * d_v), through its table
    else:
        kv = cache.append(new)  # (N, h, t, d)
        out = attn.attention(q[:, :, None], kv.k, kv.v, None)[0].reshape(N, h * d_v)
    y = add_norm(y, attn.out_proj(out), layer.self_attn_layer_norm)
    # Encoder-decoder attention: the K hypotheses of a sentence attend as K query positions of its source.
    attn = layer.cross_attn
    B = memory_kv.k.size(0)
    if through_table:
        out = attend.source(attn.q_proj(y).view(N, h, d_k), memory_kv.k, memory_kv.v, src_mask)  # (N, h * d_v)
    else:
        q = attn.q_proj(y).view(B, N // B, h, d_k).transpose(1, 2)  # (B, h, K, d_k)
        out = (
            attn.attention(q, memory_kv.k, memory_kv.v, src_mask)[0].transpose(1, 2).reshape(N, h * d_v)
        )  # (B, h, K, d_v) -> (N, h * d_v)
    y = add_norm(y, attn.out_proj(out), layer.cross_attn_layer_norm)
    ffn = layer.ffn
    fc1 = ffn.fc1  # in place where its output is its own and no hook of its may have kept it
    own_output = type(fc1) in OWN_OUTPUT and not fc1._forward_hooks
    activation = IN_PLACE.get(ffn.activation, ffn.activation) if own_output else ffn.activation
    return add_norm(y, ffn.fc2(activation(fc1(y))), layer.final_layer_norm)  # eq. (2)


def add_norm(y: Tensor, sublayer: Tensor, norm: nn.LayerNorm) -> Tensor:
    """LayerNorm(y + Sublayer(y)), the sum formed in the sub-layer's own output (a tensor of its own)."""
    return F.layer_norm(sublayer.add_(y), norm.normalized_shape, norm.weight, norm.bias, norm.eps)
