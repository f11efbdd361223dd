"""Memory, not the data, limits the batch (the walkthrough's remark on §5.1's batches).

`training_memory` counts what one training step keeps: the weights, their gradients and Adam's two moments
(4 x the parameters), and the activations autograd saves for the backward pass, counted as they are saved.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from ..config import ModelConfig
from ..model import Transformer
from ..train.loss import label_smoothed_nll


def saved_bytes(model: Transformer, batch: int, length: int) -> int:
    """Bytes of the tensors autograd saves for the backward pass of one training step (forward and the loss) on a
    batch of `batch` pairs of `length` pieces a side; tensors saved twice are counted once, and the weights (which
    the backward pass reads too) not at all."""
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, cfg.vocab_size, (batch, length), generator=g)
    tgt = torch.randint(4, cfg.target_vocab_size, (batch, length), generator=g)
    seen: dict[tuple[int, int], int] = {}
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}  # counted apart, in the fixed part

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(src, torch.cat([torch.full((batch, 1), cfg.bos_id), tgt[:, :-1]], dim=1))
        label_smoothed_nll(logits, tgt, 0.1, cfg.pad_id)
    return sum(seen.values())


def training_memory(config: ModelConfig, batches: list[int], length: int = 25) -> dict[str, Any]:
    """Memory of one training step against batch tokens (per side): the fixed part (weights, gradients, Adam's
    moments: 16 bytes a parameter) and the saved activations, counted at a few batch sizes and fitted with a line,
    and where the line meets this machine's memory (extrapolated, not allocated)."""
    torch.manual_seed(0)
    model = Transformer(config)
    params = sum(p.numel() for p in model.parameters())
    tokens = np.array([b * length for b in batches], dtype=np.float64)
    saved = np.array([saved_bytes(model, b, length) for b in batches], dtype=np.float64)
    slope, intercept = np.polyfit(tokens, saved, 1)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    fixed = 16 * params
    return {
        "parameters": params,
        "fixed_bytes": fixed,
        "tokens": tokens,
        "saved_bytes": saved,
        "bytes_per_token": slope,
        "intercept": intercept,
        "fit_error": float(np.abs(slope * tokens + intercept - saved).max() / saved.max()),
        "ram_bytes": ram,
        "max_tokens": max(0.0, (ram - fixed - intercept) / slope),
    }
