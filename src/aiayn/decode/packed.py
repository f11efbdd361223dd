"""The int8 vocabulary packed once for oneDNN's int8 product, and its rows read back out of the packing.
Not in the paper: a speed measure for int8 translation on x86 CPUs (docs/translation.md).

`torch._int_mm` multiplies by a plain int8 matrix, which oneDNN reorders into its blocked layout at
every call: at 128 rows x 512 x 58,101 (beam 4, batch 32, opus-mt) that is most of its 14-22 ms.
Packed once (`torch.ops.onednn.qlinear_prepack`), the same product takes 3-6 ms and gives the same
int32 sums, scaled the same way: identical logits. The packed matrix is then the only copy of the
vocabulary: the embedding lookups (§3.4 shares the matrix) read their rows out of it.

oneDNN packs the int8 weights of a (K, N) = (D, V) product as [N / n][K / 4][n][4]: four
consecutive k of one column, then the same four of the next column, n columns to a block (n = 64 on
AVX-512 and AMX CPUs; N padded up to a whole block, K up to a multiple of 64 or of 4). That layout is not a documented interface, so
`pack` checks it against every row before it keeps the packing, and returns None when no block
width matches: the caller then keeps the plain rows and `torch._int_mm`.
"""

from __future__ import annotations

import ctypes
import itertools

import torch
from torch import Tensor

BLOCK_WIDTHS = (64, 48, 32, 16)  # the column blocks oneDNN's int8 matmul kernels use
DEPTH_MULTIPLES = (64, 4)  # what K is padded up to
ZERO_POINT = 128  # the activations go in as uint8: round(x / scale) + 128


class PackedInt8:
    """A (V, D) int8 matrix packed for oneDNN, with a view of its bytes for row lookups."""

    def __init__(self, packed: Tensor, blocks: Tensor, vocab: int, dim: int):
        self.packed = packed  # oneDNN's opaque tensor; owns the memory blocks views
        self.blocks = blocks  # (V_pad / n, D_pad / 4, n, 4) int8, a view of packed's bytes
        self.dim = dim
        self.zero_points = torch.zeros(vocab, dtype=torch.long)  # the weights are symmetric

    def rows(self, ids: Tensor) -> Tensor:
        """The int8 rows of ids (...) -> (..., D)."""
        n = self.blocks.size(2)
        picked = self.blocks[ids // n, :, ids % n]  # (..., D_pad / 4, 4)
        return picked.flatten(-2)[..., : self.dim]

    def product(self, x: Tensor, x_scale: float, scale: Tensor, out: Tensor) -> Tensor:
        """out += (x as uint8 with x_scale) times the matrix transposed, times scale (V,) per column.

        x (N, D) float, out (N, V) float32, contiguous: oneDNN's "sum" post-op adds the product to
        what out holds (the caller fills it with zeros or a bias), so the logits land in the
        caller's buffer.
        """
        x_uint8 = torch.round(x / x_scale).add_(ZERO_POINT).to(torch.uint8)  # (N, D), 1 .. 255
        return torch.ops.onednn.qlinear_pointwise.binary(
            x_uint8, x_scale, ZERO_POINT, self.packed, scale, self.zero_points, out, None,
            1.0, 0, torch.float32, 1.0, 0, "sum", 1.0, "none", [], "")


def available() -> bool:
    """Whether this PyTorch has oneDNN's int8 linear ops (x86 builds with oneDNN)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return all(hasattr(ns, op) for ns, op in ((torch.ops.onednn, "qlinear_prepack"), (torch.ops.onednn, "qlinear_pointwise"),
                                                   (torch.ops.mkldnn, "data_ptr"), (torch.ops.mkldnn, "_nbytes")))
    except (AttributeError, RuntimeError):
        return False


def pack(weight: Tensor, rows_hint: int = 128, rows_at_once: int = 4096) -> PackedInt8 | None:
    """weight (V, D) int8 packed for oneDNN, or None where that is not available or its layout is not
    the one this module reads (every row is compared, rows_at_once at a time)."""
    if not available() or weight.dtype != torch.int8 or weight.dim() != 2:
        return None
    V, D = weight.shape
    try:
        packed = torch.ops.onednn.qlinear_prepack(weight.contiguous(), [rows_hint, D])
        nbytes, address = torch.ops.mkldnn._nbytes(packed), torch.ops.mkldnn.data_ptr(packed)
    except RuntimeError:
        return None
    memory = torch.frombuffer((ctypes.c_int8 * nbytes).from_address(address), dtype=torch.int8)  # no copy
    for n, k in itertools.product(BLOCK_WIDTHS, DEPTH_MULTIPLES):
        V_pad, D_pad = -(-V // n) * n, -(-D // k) * k
        if V_pad * D_pad > nbytes:  # the packing also holds per-column compensation after the blocks
            continue
        candidate = PackedInt8(packed, memory[: V_pad * D_pad].view(V_pad // n, D_pad // 4, n, 4), V, D)
        if all(torch.equal(candidate.rows(torch.arange(start, min(start + rows_at_once, V))), weight[start : start + rows_at_once])
               for start in range(0, V, rows_at_once)):
            return candidate
    return None
