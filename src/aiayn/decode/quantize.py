"""int8 weights for CPU translation: PyTorch's dynamic quantisation of every linear layer.

Weights are stored as int8 with one scale per output row; activations are quantised on the fly
(per batch). The pre-softmax projection, tied to the embedding (§3.4), gets its own int8 copy, so
the embedding lookup keeps its float rows; W^Q, W^K, W^V of each self-attention become one layer. Not in the paper: a speed/memory option, measured by
benchmarks/translate.py (BLEU within 0.5 of float32 is the bar).
"""

from __future__ import annotations

import gc
import warnings

import torch
from torch import nn

from ..model import Transformer


def quantize_int8(model: Transformer) -> Transformer:
    """The model with int8 linear layers, in place (eval mode, CPU only)."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 weights run on the CPU only")
    model.eval()
    if model.config.tie_output:  # a linear layer sharing the embedding matrix, quantised like the rest
        V, D = model.decoder.embed.weight.shape
        proj = nn.Linear(D, V, bias=True, device="meta")
        proj.weight = model.decoder.embed.weight
        bias = model.logits_bias if model.logits_bias is not None else torch.zeros(V)
        proj.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        model.output_proj = proj
    elif model.logits_bias is not None:  # fold the logits bias into the untied projection
        model.output_proj.bias = nn.Parameter(model.logits_bias.detach().clone(), requires_grad=False)
    for layer in (*model.encoder.layers, *model.decoder.layers):  # one int8 product for Q, K and V
        attn = layer.self_attn
        parts = (attn.q_proj, attn.k_proj, attn.v_proj)
        fused = nn.Linear(parts[0].in_features, 3 * parts[0].out_features, device="meta")
        fused.weight = nn.Parameter(torch.cat([p.weight.detach() for p in parts]), requires_grad=False)
        fused.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]), requires_grad=False)
        attn.qkv_proj = fused
        del attn.q_proj, attn.k_proj, attn.v_proj  # self-attention reads only the fused layer
    with warnings.catch_warnings():  # torch.ao's eager quantisation warns that it is deprecated
        warnings.simplefilter("ignore")
        per_row = torch.ao.quantization.per_channel_dynamic_qconfig  # a scale per output row
        torch.ao.quantization.quantize_dynamic(model, {nn.Linear: per_row}, dtype=torch.qint8, inplace=True)
    gc.collect()  # the replaced float layers sit in reference cycles: free their ~170 MiB now
    return model
