"""Decoder self-attention at a step through a row table (`attend.c`), so that reordering beams copies no cache.
Not in the paper: a speed measure (docs/translation.md, "Beams reordered without copying the cache").

`state.KVBuffer` keeps each position's keys and values where they were written. A `state.RowTable`, shared by
every layer, says which buffer row holds a hypothesis's keys and values at each position; reordering gathers the
table, and this kernel reads through it. Built like `gemv.c` (`gemv.build`); where it cannot be, `kernel()` is
None, `why_not()` says why, and the caches are copied on reordering, as before.
"""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model import DotProductAttention
from . import gemv
from .attention import OneQueryAttention

SOURCE = Path(__file__).with_name("attend.c")
SYMBOL = "aiayn_attend_f32"


@functools.lru_cache(maxsize=1)
def _load() -> tuple[object | None, str | None]:
    """(the C kernel, None), or (None, why not)."""
    function, why = gemv.build(SOURCE, SYMBOL)
    if function is None:
        return None, why
    function.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_long] * 6 + [ctypes.c_float, ctypes.c_int]
    function.restype = None
    generator = torch.Generator().manual_seed(0)
    for N, R, h, t, d_k, d_v in ((1, 1, 1, 1, 8, 8), (3, 5, 2, 7, 16, 24), (4, 4, 3, 33, 9, 5)):  # odd shapes
        k, v = torch.randn(t + 2, R, h, d_k, generator=generator), torch.randn(t + 2, R, h, d_v, generator=generator)
        table = torch.randint(0, R, (t + 2, R), generator=generator)
        q = torch.randn(N, h, d_k, generator=generator)
        if not torch.allclose(_call(function, q, k, v, table, t, N), reference(q, k, v, table, t), atol=1e-5, rtol=1e-4):
            return None, f"{SOURCE.name} disagreed with PyTorch's attention on a check (N={N}, h={h}, t={t})"
    return function, None


def kernel():
    """The built kernel, or None: see `why_not`."""
    return _load()[0]


def why_not() -> str | None:
    """Why there is no kernel, or None where there is."""
    return _load()[1]


def _call(function, q: Tensor, k: Tensor, v: Tensor, table: Tensor, t: int, N: int) -> Tensor:
    """The C call, unchecked: q (N, h, d_k) contiguous; returns (N, h * d_v)."""
    _, R, h, d_k = k.shape
    d_v = v.size(-1)
    out, scores = torch.empty(N, h * d_v), torch.empty(N * h * t)
    function(q.data_ptr(), k.data_ptr(), v.data_ptr(), table.data_ptr(), out.data_ptr(), scores.data_ptr(),
             N, h, t, d_k, d_v, R, 1 / math.sqrt(d_k), torch.get_num_threads())
    return out


def attend(q: Tensor, k: Tensor, v: Tensor, table: Tensor, t: int) -> Tensor:
    """softmax(q K^T / sqrt(d_k)) V for each of q's N rows over positions 0..t-1 (eq. 1, §3.2.3), row n's keys and
    values at position j read from buffer row table[j, n]: q (N, h, d_k); k (capacity, R, h, d_k), v (capacity, R,
    h, d_v), table (capacity, R) int64, as `state.KVBuffer` keeps them. Returns (N, h * d_v). The caller
    (`state.KVBuffer.attend`) holds these shapes; the kernel reads no further than they say."""
    return _call(_load()[0], q.contiguous(), k, v, table, t, q.size(0))


def reference(q: Tensor, k: Tensor, v: Tensor, table: Tensor, t: int) -> Tensor:
    """`attend` in PyTorch: the rows gathered through the table, then PyTorch's attention. (N, h * d_v)."""
    N, h, _ = q.shape
    rows = table[:t, :N]  # (t, N)
    positions = torch.arange(t)[:, None]
    keys, values = k[positions, rows].permute(1, 2, 0, 3), v[positions, rows].permute(1, 2, 0, 3)  # (N, h, t, d)
    return F.scaled_dot_product_attention(q[:, :, None], keys, values).reshape(N, -1)


def takes(attention: nn.Module) -> bool:
    """Whether a layer's attention module computes plain eq. (1), so that the kernel may stand in for it: the
    model's own or `attention.OneQueryAttention`, as they are (no subclass, hook or forward of its own), not training."""
    return (type(attention) in (DotProductAttention, OneQueryAttention) and "forward" not in vars(attention)
            and not attention.training and not attention._forward_hooks and not attention._forward_pre_hooks)
