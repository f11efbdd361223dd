"""One position's whole computation through the model (§3), read from the model's own modules.

`trace` runs one teacher-forced pass of the paper's model (float32, no second copy of its layers) with forward
hooks on its modules, and returns for one source or target position each stage of §3: the embedding times
sqrt(d_model) (§3.4), the positional encoding added (§3.5), and in one chosen layer, for each attention, the
position's query and every key and value per head, the scores q.k, divided by sqrt(d_k), masked, the softmax
(§3.2.1), the weighted sum per head, their concatenation, W^O (§3.2.2), the residual plus LayerNorm, then the
FFN (§3.3) and its residual plus LayerNorm (§3.1); the norm of the residual stream after every sub-layer of
every layer; and for a target position the logits, their softmax and the top tokens (§3.4).

Dimension legend: h heads, S source and T target positions, K keys (S, or T), D d_model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from .transformer import Transformer


@contextmanager
def recorded(modules: dict[str, nn.Module], last: bool) -> Iterator[dict[str, Tensor]]:
    """Each module's output (or, for a name ending in ":input", its first input) in the next forward pass: of its
    first call, or with last of its last one (the encoder and decoder may share their embedding modules, which
    the encoder calls first)."""
    seen: dict[str, Tensor] = {}

    def keep(name: str, value: Tensor) -> None:
        if last or name not in seen:
            seen[name] = value.detach()

    handles = []
    for name, module in modules.items():
        if name.endswith(":input"):
            hook = lambda m, args, name=name: keep(name, args[0])
            handles.append(module.register_forward_pre_hook(hook))
        else:
            hook = lambda m, args, out, name=name: keep(name, out)
            handles.append(module.register_forward_hook(hook))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def _attention_modules(prefix: str, attn: nn.Module) -> dict[str, nn.Module]:
    return {
        f"{prefix}.q": attn.q_proj,
        f"{prefix}.k": attn.k_proj,
        f"{prefix}.v": attn.v_proj,
        f"{prefix}.concat:input": attn.out_proj,
        f"{prefix}.out": attn.out_proj,
    }


def _heads(x: Tensor, h: int) -> Tensor:
    """(1, K, h*d) -> (h, K, d)."""
    return x[0].view(x.size(1), h, -1).transpose(0, 1)


def _attention_stages(seen: dict[str, Tensor], prefix: str, h: int, position: int, masked: Tensor) -> dict[str, Any]:
    """The stages of one multi-head attention for the query at position; masked (K,) marks keys it may not see."""
    q = _heads(seen[f"{prefix}.q"], h)[:, position]  # (h, d_k)
    k, v = _heads(seen[f"{prefix}.k"], h), _heads(seen[f"{prefix}.v"], h)  # (h, K, d_k), (h, K, d_v)
    scores = torch.einsum("hd,hkd->hk", q, k)  # (h, K)
    scaled = scores / math.sqrt(q.size(-1))
    with_mask = scaled.masked_fill(masked, -math.inf)
    weights = with_mask.softmax(dim=-1)  # (h, K)
    return {
        "query": q.tolist(),
        "keys": k.tolist(),
        "values": v.tolist(),
        "scores": scores.tolist(),
        "scaled": scaled.tolist(),
        "masked": masked.tolist(),
        "unscaled_softmax": scores.masked_fill(masked, -math.inf).softmax(dim=-1).tolist(),
        "weights": weights.tolist(),
        "heads": torch.einsum("hk,hkd->hd", weights, v).tolist(),  # (h, d_v): each head's weighted sum
        "concat": seen[f"{prefix}.concat:input"][0, position].tolist(),  # (h*d_v,)
        "output": seen[f"{prefix}.out"][0, position].tolist(),  # W^O: (D,)
    }


@torch.no_grad()
def trace(
    model: Transformer, src: Tensor, tgt_in: Tensor, side: str, position: int, layer: int, top: int = 10
) -> dict[str, Any]:
    """Every stage of §3 for position of side ("source" or "target") of one sentence pair, src (1, S) and tgt_in
    (1, T) shifted right, in layer (0-based) of that side's stack; see the module's docstring."""
    if side not in ("source", "target"):
        raise ValueError(f"side must be source or target, not {side!r}")
    stack = model.encoder if side == "source" else model.decoder
    length = src.size(1) if side == "source" else tgt_in.size(1)
    if not 0 <= position < length:
        raise ValueError(f"position {position} is out of range: 0 to {length - 1}")
    if not 0 <= layer < len(stack.layers):
        raise ValueError(f"layer {layer} is out of range: 0 to {len(stack.layers) - 1}")
    config = model.config
    modules: dict[str, nn.Module] = {"embed": stack.embed, "positions": stack.positions}
    for i, block in enumerate(stack.layers):
        modules[f"{i}.self_norm"] = block.self_attn_layer_norm
        modules[f"{i}.ffn"] = block.ffn
        modules[f"{i}.final_norm"] = block.final_layer_norm
        if side == "target":
            modules[f"{i}.cross_norm"] = block.cross_attn_layer_norm
    chosen = stack.layers[layer]
    modules |= _attention_modules("self", chosen.self_attn)
    if side == "target":
        modules |= _attention_modules("cross", chosen.cross_attn)
    with recorded(modules, last=side == "target") as seen:
        was_training = model.training
        model.eval()
        try:
            logits = model(src, tgt_in)  # (1, T, V)
        finally:
            model.train(was_training)
    h = chosen.self_attn.heads
    pad = src[0] == config.pad_id  # (S,): padding, never attended to
    own_mask = pad if side == "source" else torch.arange(length) > position  # the decoder's: no later position
    embedded = seen["embed"][0, position]
    sublayers = ("self_norm", "cross_norm", "final_norm") if side == "target" else ("self_norm", "final_norm")
    out: dict[str, Any] = {
        "side": side,
        "position": position,
        "layer": layer,
        "heads": h,
        "embedding": embedded.tolist(),  # the token's row times sqrt(d_model) (§3.4)
        "positional_encoding": seen["positions"][position].tolist(),
        "input": (embedded + seen["positions"][position]).tolist(),  # what the first layer reads (dropout off)
        "residual_norms": [
            {name: float(seen[f"{i}.{name}"][0, position].norm()) for name in sublayers}
            for i in range(len(stack.layers))
        ],
        "self_attention": _attention_stages(seen, "self", h, position, own_mask),
        "self_attention_norm": seen[f"{layer}.self_norm"][0, position].tolist(),
        "ffn": seen[f"{layer}.ffn"][0, position].tolist(),
        "output": seen[f"{layer}.final_norm"][0, position].tolist(),
    }
    if side == "target":
        out["cross_attention"] = _attention_stages(seen, "cross", h, position, pad)
        out["cross_attention_norm"] = seen[f"{layer}.cross_norm"][0, position].tolist()
        row = logits[0, position].clone()  # (V,)
        row[[config.pad_id, config.bos_id]] = -math.inf  # never written
        probs = row.softmax(dim=-1)
        best = probs.topk(min(top, probs.numel()))
        out["logits"] = {
            "ids": best.indices.tolist(),
            "logits": row[best.indices].tolist(),
            "probs": best.values.tolist(),
        }
    return out
