"""Attention masks, one convention everywhere: boolean, True = may attend (§3.2.3).

Shapes broadcast against attention scores (B, h, T_q, T_k):
padding masks are (B, 1, 1, S), the causal mask is (1, 1, T, T).
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, S) token ids -> (B, 1, 1, S), False at padding positions."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | None = None) -> Tensor:
    """(1, 1, T_q, T_k): query i may read keys j <= i + (T_k - T_q).

    With T_k > T_q the queries are the last T_q positions of a longer sequence, as in incremental
    decoding with a cache of T_k - T_q earlier positions.
    """
    t_k = t_q if t_k is None else t_k
    mask = torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)
    return mask[None, None]
