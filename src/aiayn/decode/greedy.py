"""Greedy decoding with the incremental decoder: one new token per step, cached keys/values."""

from __future__ import annotations

import torch
from torch import Tensor

from ..model import Transformer


@torch.no_grad()
def greedy_search(model: Transformer, src: Tensor, max_len: int | Tensor | None = None, extra: int = 50) -> Tensor:
    """The most probable token at each step until </s>: src (B, S) -> hypotheses (B, L), pad after </s>.

    The output stops at max_len tokens (default: source length + `extra`, §6.1) or when every
    sentence has produced </s>. The encoder runs once; the decoder takes one token per step.
    """
    cfg = model.config
    B = src.size(0)
    if max_len is None:
        max_len = src.size(1) + extra
    memory, src_mask = model.encode(src)
    state = model.start_state(memory, src_mask)
    tokens = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=src.device)
    out = []
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(int(max_len)):
        logits, state = model.decode_step(tokens, state)  # (B, V)
        logits[:, cfg.pad_id] = float("-inf")  # never write the pad / start token
        tokens = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = tokens.masked_fill(done[:, None], cfg.pad_id)
        out.append(tokens)
        done |= tokens[:, 0] == cfg.eos_id
        if done.all():
            break
    return torch.cat(out, dim=1)
