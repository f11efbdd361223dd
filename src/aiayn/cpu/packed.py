"""A vocabulary matrix packed once for oneDNN's product, and its rows read back out of the packing.
Not in the paper: speed measures for translation on x86 CPUs (docs/studies/translation-int8.md and
translation-speed.md, "The vocabulary packed for oneDNN").

int8. `torch._int_mm` multiplies by a plain int8 matrix, which oneDNN reorders into its blocked layout at
every call, most of the product's time at decoding's shapes. Packed once (`torch.ops.onednn.qlinear_prepack`),
the same product gives the same int32 sums, scaled the same way: identical logits. oneDNN packs the int8 weights of a (K, N) = (D, V)
product as [N / n][K / 4][n][4]: four consecutive k of one column, then the same four of the next
column, n columns to a block (n = 64 on AVX-512 and AMX CPUs; N padded up to a whole block, K up to a
multiple of 64 or of 4). Other CPUs (AVX2 only) pack otherwise: `pack` finds no layout it reads there, and the
vocabulary stays in plain rows.

float32. With few rows (batch 1: 1 to 4 hypotheses) MKL's sgemm reads the plain matrix at a fraction
of the rate oneDNN reaches on a matrix reordered once (`torch.ops.mkldnn._reorder_linear_weight`). oneDNN lays
it out as
[N / n][K][n], n = 64 (K padded up to a multiple of 16 where it is not one already).

Either way the packed matrix is then the only copy of the vocabulary: the embedding lookups (§3.4
shares the matrix) read their rows out of it. That layout is not a documented interface, so `pack`
checks it against every row before it keeps the packing, and `pack_float32` finds it on a probe
matrix and then checks a product with the packing against the same product with the matrix; both
return None when no layout matches: the caller then keeps the plain rows.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable

import torch
from torch import Tensor

BLOCK_WIDTHS = (64, 48, 32, 16)  # the column blocks oneDNN's matmul kernels use
DEPTH_MULTIPLES = (64, 4)  # what K is padded up to (int8)
FLOAT_DEPTH_MULTIPLES = (1, 16, 64)  # (float32)
MIN_ROWS_HINT = 4  # packed for fewer rows, oneDNN keeps the plain (V, D) matrix
PROBE_ROWS = 1031  # the float32 layout is found on a matrix of 16 blocks of 64 and a partial one
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
            x_uint8,
            x_scale,
            ZERO_POINT,
            self.packed,
            scale,
            self.zero_points,
            out,
            None,
            1.0,
            0,
            torch.float32,
            1.0,
            0,
            "sum",
            1.0,
            "none",
            [],
            "",
        )


def available() -> bool:
    """Whether this PyTorch has oneDNN's int8 linear ops (x86 builds with oneDNN)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return all(
            hasattr(ns, op)
            for ns, op in (
                (torch.ops.onednn, "qlinear_prepack"),
                (torch.ops.onednn, "qlinear_pointwise"),
                (torch.ops.mkldnn, "data_ptr"),
                (torch.ops.mkldnn, "_nbytes"),
            )
        )
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
        if reads_back(candidate, weight, rows_at_once):
            return candidate
    return None


def reads_back(candidate: PackedInt8 | PackedFloat32, weight: Tensor, rows_at_once: int) -> bool:
    """Whether candidate.rows gives back every row of weight (V, D), rows_at_once rows at a time."""
    V = weight.size(0)
    return all(
        torch.equal(
            candidate.rows(torch.arange(start, min(start + rows_at_once, V))), weight[start : start + rows_at_once]
        )
        for start in range(0, V, rows_at_once)
    )


class PackedFloat32:
    """A (V, D) float32 matrix packed for oneDNN, with a view of its memory for row lookups."""

    def __init__(self, packed: Tensor, blocks: Tensor, vocab: int, dim: int):
        self.packed = packed  # oneDNN's opaque tensor; owns the memory blocks views
        self.blocks = blocks  # (V_pad / n, D_pad, n) float32, a view of packed's memory
        self.vocab, self.dim = vocab, dim

    def rows(self, ids: Tensor) -> Tensor:
        """The rows of ids (...) -> (..., D), a copy."""
        n = self.blocks.size(2)
        return self.blocks[ids // n, : self.dim, ids % n]

    def product(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        """x (N, D) float32 times the matrix transposed, plus bias (V,) if given: a new (N, V) tensor."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")


def float32_available() -> bool:
    """Whether this PyTorch can pack a float32 matrix for oneDNN and show its memory."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return all(
            hasattr(torch.ops.mkldnn, op)
            for op in ("_reorder_linear_weight", "_linear_pointwise", "data_ptr", "_nbytes")
        )
    except (AttributeError, RuntimeError):
        return False


def reorder_float32(weight: Tensor, rows: int) -> Tensor:
    """weight (out, in) float32 reordered once for oneDNN's product with about `rows` rows (at least
    MIN_ROWS_HINT, below which oneDNN keeps the plain matrix): a new, opaque tensor only oneDNN reads."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), max(rows, MIN_ROWS_HINT))


def pack_float32(
    weight: Tensor, rows_hint: int = MIN_ROWS_HINT, rows_at_once: int = 4096, release: Callable[[], None] | None = None
) -> PackedFloat32 | None:
    """weight (V, D) float32 packed for oneDNN's product with about rows_hint rows, or None where that is not
    available or its layout is not one this module reads.

    The layout is found on a small matrix of the same width packed by oneDNN (every row read back).
    The vocabulary's packing is then made from an untouched matrix (its pages never become the
    process's memory) and filled rows_at_once rows at a time, release (if given) called after each,
    so that a memory-mapped weight is never all in memory beside its packing (`aiayn.cpu.memory.MappedReads`).
    Last, a product with the packing must match the same product with weight.
    """
    if not float32_available() or weight.dtype != torch.float32 or weight.dim() != 2:
        return None
    V, D = weight.shape
    try:
        probe = torch.randn(PROBE_ROWS, D, generator=torch.Generator().manual_seed(0))
        layout = _layout(probe, reorder_float32(probe, rows_hint), rows_at_once)
        if layout is None:
            return None
        packed = _view(reorder_float32(torch.empty(V, D), rows_hint), *layout, V, D)
    except RuntimeError:
        return None
    if packed is None:
        return None
    n = packed.blocks.size(2)
    packed.blocks[:, D:].zero_()  # K's padding multiplies the input's padding: it must hold no NaN
    x = torch.randn(4, D, generator=torch.Generator().manual_seed(1))
    expected = torch.empty(4, V)
    step = max(n, rows_at_once // n * n)  # whole blocks at a time
    for start in range(0, V, step):
        block = weight[start : start + step]  # (b, D)
        full = block.size(0) // n * n
        first = start // n
        packed.blocks[first : first + full // n, :D] = block[:full].reshape(-1, n, D).transpose(1, 2)
        if full < block.size(0):  # the last, partial block; its padded columns are zero
            packed.blocks[first + full // n, :D] = torch.cat(
                [block[full:], block.new_zeros(n - (block.size(0) - full), D)]
            ).t()
        expected[:, start : start + step] = x @ block.t()
        if release is not None:
            release()
    if not torch.allclose(
        packed.product(x), expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max().clamp(min=1)), equal_nan=True
    ):
        return None
    return packed


def _layout(weight: Tensor, packed: Tensor, rows_at_once: int) -> tuple[int, int] | None:
    """(n, k): the block width and K's multiple of the layout [V_pad / n][D_pad][n] that reads weight back out of packed."""
    V, D = weight.shape
    for n, k in itertools.product(BLOCK_WIDTHS, FLOAT_DEPTH_MULTIPLES):
        candidate = _view(packed, n, k, V, D)
        if candidate is not None and reads_back(candidate, weight, rows_at_once):
            return n, k
    return None


def _view(packed: Tensor, n: int, k: int, V: int, D: int) -> PackedFloat32 | None:
    """packed's memory seen as [V_pad / n][D_pad][n] float32, or None where it holds less than that."""
    nbytes, address = torch.ops.mkldnn._nbytes(packed), torch.ops.mkldnn.data_ptr(packed)
    V_pad, D_pad = -(-V // n) * n, -(-D // k) * k
    if V_pad * D_pad * 4 > nbytes:
        return None
    memory = torch.frombuffer((ctypes.c_float * (nbytes // 4)).from_address(address), dtype=torch.float32)  # no copy
    return PackedFloat32(packed, memory[: V_pad * D_pad].view(V_pad // n, D_pad, n), V, D)
