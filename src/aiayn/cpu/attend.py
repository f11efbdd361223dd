"""A decoding step's two attentions in C (`attend.c`): self-attention through a row table, so that reordering beams
copies no cache, and encoder-decoder attention. Not in the paper: a speed measure (docs/studies/translation-speed.md, "Beams
reordered without copying the cache").

`state.KVBuffer` keeps each position's keys and values where they were written. A `state.RowTable`, shared by
every layer, says which buffer row holds a hypothesis's keys and values at each position; reordering gathers the
table, and the self-attention kernel reads through it. Built like `gemv.c` (`gemv.build`); where it cannot be,
`kernel()` is None, `why_not()` says why, and the caches are copied on reordering, as before.
"""

from __future__ import annotations

import ctypes
import functools
import math
import platform
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model import DotProductAttention
from . import gemv
from .query_attention import OneQueryAttention, SourceAttention

SOURCE = Path(__file__).with_name("attend.c")
SYMBOLS = ("aiayn_attend_f32", "aiayn_source_attend_f32")
# How to build it, tried in turn: on x86-64 glibc with its vector maths (libmvec: the softmax's exp, 16 at a time
# with AVX-512), then with libm's scalar exp alone.
BUILDS = ((("-lmvec", "-lm"), ("-DAIAYN_LIBMVEC",)),) * (platform.machine() == "x86_64") + ((("-lm",), ()),)


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple | None, str | None]:
    """((self-attention kernel, encoder-decoder attention kernel), None), or (None, why not)."""
    why = None
    for libraries, defines in BUILDS:
        library, why = gemv.build(SOURCE, libraries, defines)
        if library is None:
            continue
        try:
            functions = tuple(getattr(library, symbol) for symbol in SYMBOLS)
            for function in functions:
                function.restype = None
                function.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_long] * 6 + [ctypes.c_float, ctypes.c_int]
            with (
                torch.autocast("cpu", enabled=False),
                torch.inference_mode(),
            ):  # the checks in float32, as decoding calls it
                why = _check(*functions)
        except Exception as err:  # optional: whatever goes wrong, decoding goes on without it, and says why
            why = f"{SOURCE.name}'s check failed: {err}"
        if why is None:
            return functions, None
    return None, why


def _check(self_attention, source_attention) -> str | None:
    """None where both kernels give PyTorch's attention on odd shapes, else what disagreed."""
    generator = torch.Generator().manual_seed(0)
    randn = functools.partial(torch.randn, generator=generator, dtype=torch.float32)  # float32 whatever the default
    for N, R, h, t, d_k, d_v in ((1, 1, 1, 1, 8, 8), (3, 5, 2, 7, 16, 24), (4, 4, 3, 33, 9, 5)):
        k, v = randn(t + 2, R, h, d_k), randn(t + 2, R, h, d_v)
        table = torch.randint(0, R, (t + 2, R), generator=generator)
        q = randn(N, h, d_k)
        if not torch.allclose(
            _self(self_attention, q, k, v, table, t), reference(q, k, v, table, t), atol=1e-5, rtol=1e-4
        ):
            return f"{SOURCE.name} disagreed with PyTorch's attention on a check (N={N}, h={h}, t={t})"
    for B, K, h, S, d_k, d_v in ((1, 1, 1, 1, 8, 8), (3, 2, 2, 9, 16, 24), (2, 4, 3, 33, 9, 5)):
        q = randn(B * K, h, d_k)
        k, v = randn(B, h, S, d_k), randn(B, h, S, d_v)
        mask = torch.arange(S) < torch.randint(1, S + 1, (B, 1), generator=generator)  # (B, S), at least one True
        if not torch.allclose(
            _source(source_attention, q, k, v, mask), source_reference(q, k, v, mask), atol=1e-5, rtol=1e-4
        ):
            return f"{SOURCE.name} disagreed with PyTorch's attention on a check (B={B}, K={K}, S={S})"
    return None


def kernel():
    """The built kernels (self-attention, encoder-decoder attention), or None: see `why_not`."""
    return _load()[0]


def why_not() -> str | None:
    """Why there are no kernels, or None where there are."""
    return _load()[1]


def _self(function, q: Tensor, k: Tensor, v: Tensor, table: Tensor, t: int) -> Tensor:
    """The self-attention call, unchecked: q (N, h, d_k) contiguous; returns (N, h * d_v)."""
    N = q.size(0)
    _, R, h, d_k = k.shape
    d_v = v.size(-1)
    out, scores = (
        torch.empty(N, h * d_v, dtype=torch.float32, device="cpu"),
        torch.empty(N * h * t, dtype=torch.float32, device="cpu"),
    )
    function(
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        table.data_ptr(),
        out.data_ptr(),
        scores.data_ptr(),
        N,
        h,
        t,
        d_k,
        d_v,
        R,
        1 / math.sqrt(d_k),
        torch.get_num_threads(),
    )
    return out


def _source(function, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """The encoder-decoder call, unchecked: q (B * K, h, d_k), k, v, mask (B, S) bool, contiguous; (B * K, h * d_v)."""
    B, h, S, d_k = k.shape
    K, d_v = q.size(0) // B, v.size(-1)
    out, scores = (
        torch.empty(B * K, h * d_v, dtype=torch.float32, device="cpu"),
        torch.empty(B * h * K * S, dtype=torch.float32, device="cpu"),
    )
    function(
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        mask.data_ptr(),
        out.data_ptr(),
        scores.data_ptr(),
        B,
        K,
        h,
        S,
        d_k,
        d_v,
        1 / math.sqrt(d_k),
        torch.get_num_threads(),
    )
    return out


def attend(q: Tensor, k: Tensor, v: Tensor, table: Tensor, t: int) -> Tensor:
    """softmax(q K^T / sqrt(d_k)) V for each of q's N rows over positions 0..t-1 (eq. 1, §3.2.3), row n's keys and
    values at position j read from buffer row table[j, n]: q (N, h, d_k); k (capacity, R, h, d_k), v (capacity, R,
    h, d_v), table (capacity, R) int64, as `state.KVBuffer` keeps them. Returns (N, h * d_v). The caller
    (`state.KVBuffer.attend`) holds these shapes; the kernel reads no further than they say."""
    capacity, R, h, d_k = k.shape
    if not _float32_cpu(q, k, v):
        raise ValueError("attend.attend takes float32 tensors on the CPU")
    if (
        q.shape[1:] != (h, d_k)
        or q.size(0) > R
        or v.shape[:3] != k.shape[:3]
        or table.shape != (capacity, R)
        or not 0 < t <= capacity
        or table.dtype != torch.long
        or not (k.is_contiguous() and v.is_contiguous() and table.is_contiguous())
    ):
        raise ValueError(
            f"attend.attend: q {tuple(q.shape)}, keys {tuple(k.shape)}, table {tuple(table.shape)}, t={t} do not go together"
        )
    return _self(_load()[0][0], q.contiguous(), k, v, table, t)


def source(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Encoder-decoder attention at a step (eq. 1): the K hypotheses of each sentence (q (B * K, h, d_k), a
    sentence's rows together) over its encoder keys and values k (B, h, S, d_k), v (B, h, S, d_v), float32 on the
    CPU, where mask (B, 1, 1, S) is True (None: everywhere). Returns (B * K, h * d_v), rows as q's."""
    B, h, S, d_k = k.shape
    mask = torch.ones(B, S, dtype=torch.bool) if mask is None else mask
    if not _float32_cpu(q, k, v) or mask.dtype != torch.bool:
        raise ValueError("attend.source takes float32 tensors and a bool mask on the CPU")
    if (
        (mask.shape != (B, 1, 1, S) and mask.shape != (B, S))
        or q.size(0) % B
        or q.shape[1:] != (h, d_k)
        or v.shape[:3] != (B, h, S)
        or not (k.is_contiguous() and v.is_contiguous())
    ):
        raise ValueError(
            f"attend.source: q {tuple(q.shape)}, keys {tuple(k.shape)}, mask {tuple(mask.shape)} do not go together"
        )
    return _source(_load()[0][1], q.contiguous(), k, v, mask.reshape(B, S).contiguous())


def _float32_cpu(*tensors: Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)


def reference(q: Tensor, k: Tensor, v: Tensor, table: Tensor, t: int) -> Tensor:
    """`attend` in PyTorch: the rows gathered through the table, then PyTorch's attention. (N, h * d_v)."""
    N, h, _ = q.shape
    rows = table[:t, :N]  # (t, N)
    positions = torch.arange(t)[:, None]
    keys, values = k[positions, rows].permute(1, 2, 0, 3), v[positions, rows].permute(1, 2, 0, 3)  # (N, h, t, d)
    return F.scaled_dot_product_attention(q[:, :, None], keys, values).reshape(N, -1)


def source_reference(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """`source` in PyTorch: (B * K, h * d_v)."""
    B, h, _, _ = k.shape
    N = q.size(0)
    queries = q.view(B, N // B, h, -1).transpose(1, 2)  # (B, h, K, d_k)
    out = F.scaled_dot_product_attention(queries, k, v, attn_mask=mask.view(B, 1, 1, -1))  # (B, h, K, d_v)
    return out.transpose(1, 2).reshape(N, -1)


def supports(attention: nn.Module) -> bool:
    """Whether a layer's attention module computes plain eq. (1), so that a kernel may stand in for it: the model's
    own, `attention.OneQueryAttention` or `attention.SourceAttention`, as they are (no subclass, hook or forward of
    its own), not training."""
    return (
        type(attention) in (DotProductAttention, OneQueryAttention, SourceAttention)
        and "forward" not in vars(attention)
        and not attention.training
        and not attention._forward_hooks
        and not attention._forward_pre_hooks
    )
