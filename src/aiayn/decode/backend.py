"""Decoding's matrix products on the faster of the CPU's two float32 backends. Not in the paper: a speed measure.

PyTorch's CPU build runs `F.linear` on MKL's sgemm; oneDNN, which it also ships, is reached
through `torch.ops.mkldnn._linear_pointwise`. Which is faster depends on the host: on some 2-core
AMD EPYC machines MKL reaches about half of oneDNN's rate for decoding's few-row products, on
others it is the faster (docs/translation.md). So `choose` measures both on the model's own shapes
(a few products, well under a second) when a `Translator` loads and takes oneDNN where it is clearly
the faster (`ONEDNN_MARGIN`). With few rows (batch 1) the vocabulary's product is the larger part of
a step, and oneDNN runs it 1.5-2x faster on a matrix packed once for it than either backend on the
plain one; so the same measurement also times the packed vocabulary, and "+packed" is added where it
makes the step's products faster (by `PACKED_MARGIN` where its fresh logits each step are large). A
backend can be forced by an option or by the environment variable AIAYN_GEMM (mkl, onednn,
mkl+packed, onednn+packed), so that a run can be reproduced.
Under torch.distributed every rank takes rank 0's choice. Both compute x W^T + b in float32: the
logits agree to rounding (tests/test_backend.py), the translations are the same.

- "mkl": matrices stored column-major (`layout.for_decoding`), so x W^T is MKL's NN product.
- "onednn": matrices kept as stored (row-major); every linear layer and the pre-softmax projection
  replaced by modules that call oneDNN with the same tensors (no second copy of any weight).
- "+packed": the vocabulary matrix (§3.4: the embeddings' and the projection's) packed once for
  oneDNN's float32 product and held only so; the embeddings read their rows out of the packing
  (`vocabulary.py`, `packed.py`). The linear layers as in "mkl" or "onednn".
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..config import ModelConfig
from ..model import OutputProjection
from .packed import MIN_ROWS_HINT, float32_available

LAYER_BACKENDS = ("mkl", "onednn")  # what runs the linear layers (training's choice too: train/gemm.py)
BACKENDS = (*LAYER_BACKENDS, "mkl+packed", "onednn+packed")
ENV = "AIAYN_GEMM"
# oneDNN is taken only where its products measure at least this much faster than MKL's. The products
# alone do not show one cost: oneDNN returns the (rows, V) logits as a new tensor each step, where the
# MKL path writes them into one buffer (`projection.py`), and the C heap may hand those 30 MiB back and
# fault them in again (at beam 4, batch 32: 60k-240k page faults a batch against 43k). On an Intel
# host with AMX the two measured level (MKL / oneDNN time 0.92-1.12 at 128 rows over 16 measurements),
# and in decoding MKL was 4-11% faster at beam 4, batch 32 and peaked 100 MiB lower; where oneDNN wins
# (2-core EPYC hosts: 1.5-2.5x MKL's rate at 4-128 rows), it wins by far more than this (docs/translation.md).
ONEDNN_MARGIN = 1.25
# The packed vocabulary too returns each step's logits as a new tensor. Where they are small that costs
# nothing measurable, and packing is taken wherever it measures faster: up to `FRESH_LOGITS_FREE` bytes of
# logits (greedy at batch 32 with opus-mt's 58,101 pieces: 7.1 MiB; 1.07-1.09x faster decoding with it on a
# 2-core AMX host), or where the layers' backend (oneDNN) returns fresh logits anyway. Larger, in place of
# MKL's reused buffer, it must measure `PACKED_MARGIN` times faster: at beam 4, batch 32 (28 MiB) the two
# products measured level and decoding with the packed vocabulary was 4-5% slower (docs/translation.md).
FRESH_LOGITS_FREE = 8 << 20
PACKED_MARGIN = ONEDNN_MARGIN
FEW_ROWS = 32  # up to this many rows a step's products are bound by memory: `measure` reads the whole vocabulary


def layers_of(name: str) -> str:
    """The backend of the linear layers: "mkl" or "onednn"."""
    return name.split("+")[0]


def packs_vocabulary(name: str) -> bool:
    return name.endswith("+packed")


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) W^T (+ b) on oneDNN; W (out, in) as stored."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class OneDnnLinear(nn.Module):
    """nn.Linear's product on oneDNN, with the layer's own weight and bias (inference only)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: Tensor) -> Tensor:
        return onednn_linear(x, self.weight, self.bias)


class OneDnnProjection(nn.Module):
    """OutputProjection (§3.4) on oneDNN, the logits bias added inside the product."""

    def __init__(self, projection: OutputProjection):
        super().__init__()
        self.projection = projection  # keeps its matrix (tied: the embedding's), read at every call

    @property
    def matrix(self) -> Tensor:
        return self.projection.matrix

    def forward(self, hidden: Tensor, bias: Tensor | None = None) -> Tensor:
        return onednn_linear(hidden, self.projection.matrix, bias)


def forced(option: str | None = None) -> str | None:
    """The backend asked for by the option, else by AIAYN_GEMM; None = measure. An unknown name is an error."""
    name = option if option not in (None, "auto") else os.environ.get(ENV) or None
    if name in (None, "auto"):
        return None
    if name not in BACKENDS:
        where = "the gemm option" if option not in (None, "auto") else f"{ENV}"
        raise ValueError(f"{where}: unknown GEMM backend {name!r}; choose auto, {', '.join(BACKENDS)}")
    if layers_of(name) == "onednn" and not onednn_available():
        raise ValueError(f"GEMM backend {name}: this PyTorch build has no oneDNN")
    if packs_vocabulary(name) and not float32_available():
        raise ValueError(f"GEMM backend {name}: this PyTorch build cannot pack a matrix for oneDNN")
    return name


def measure(config: ModelConfig, rows: int, repeats: int = 3) -> dict[str, float]:
    """Seconds per decoding step's products on each backend, estimated from one FFN matrix and the projection.

    Matrices of the model's widths stand in for its weights (rates depend on shapes, not on values):
    (rows, d_model) times W_1 (d_ff, d_model) and times the vocabulary, plain and (where oneDNN can)
    packed. With up to `FEW_ROWS` rows the product streams the whole vocabulary from memory at every
    step, so the whole of it is measured (a slice stays in the cache and shows a rate decoding does not
    get: MKL's step 4.2 against 8.4 ms at 4 rows on a 2-core AMX host); with more rows the product is
    bound by arithmetic and 16,384 of its rows show the rate. Each time is scaled to its share of a
    step: the decoder layers' per-step weights (6 d_model^2 + 2 d_model d_ff a layer: self-attention,
    encoder-decoder queries and output, FFN) over W_1's, and the whole vocabulary over the rows measured.
    """
    generator = torch.Generator().manual_seed(0)
    D, F, V = config.d_model, config.decoder.d_ff, config.target_vocab_size
    measured = V if rows <= FEW_ROWS else min(V, 16384)
    layers = config.decoder.layers * (6 * D * D + 2 * D * F) / (F * D)  # a step's decoder weights, in W_1s
    x = torch.randn(rows, D, generator=generator)
    w1 = torch.randn(F, D, generator=generator)
    w1_columns = w1.t().contiguous().t()  # MKL's layout (layout.column_major)
    with torch.inference_mode():
        ffn = {"mkl": layers * best_seconds(lambda: x @ w1_columns.t(), repeats)}
        if onednn_available():
            ffn["onednn"] = layers * best_seconds(lambda: onednn_linear(x, w1, None), repeats)
        projection = {name: V / measured * s for name, s in projection_seconds(x, measured, repeats).items()}
    seconds = {name: ffn[name] + projection[name] for name in ffn}
    if "packed" in projection:
        seconds.update({f"{name}+packed": ffn[name] + projection["packed"] for name in ffn})
    return seconds


def projection_seconds(x: Tensor, V: int, repeats: int) -> dict[str, float]:
    """Seconds of x (N, D) times a (V, D) matrix: "mkl" column-major, "onednn" row-major, "packed" packed for oneDNN.

    One matrix at a time besides the one it is made from (at most two vocabulary-sized matrices: loading the
    model, after this, takes more), filled with a constant: random values would cost more than the products.
    """
    D, seconds = x.size(1), {}
    plain = torch.full((V, D), 0.5)  # (V, D), as stored
    if onednn_available():
        seconds["onednn"] = best_seconds(lambda: onednn_linear(x, plain, None), repeats)
    if float32_available():  # packed as `packed.pack_float32` packs the vocabulary
        packed = torch.ops.mkldnn._reorder_linear_weight(plain, max(x.size(0), MIN_ROWS_HINT))
        seconds["packed"] = best_seconds(lambda: onednn_linear(x, packed, None), repeats)
        del packed
    columns = plain.t().contiguous().t()  # MKL's layout (layout.column_major)
    del plain
    seconds["mkl"] = best_seconds(lambda: x @ columns.t(), repeats)
    return seconds


def best_seconds(run, repeats: int) -> float:
    """The fastest of `repeats` timed calls of run(), after one untimed call (first-call set-up is not the rate)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best


def rank_zeros(name: str) -> str:
    """Under torch.distributed, rank 0's name on every rank, so that one job computes one way."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        shared = [name]
        dist.broadcast_object_list(shared, src=0)
        name = shared[0]
    return name


def choose(config: ModelConfig, rows: int, option: str | None = None) -> str:
    """The backend for decoding this model on this CPU: forced (option, AIAYN_GEMM) or the faster measured,
    where oneDNN must be `ONEDNN_MARGIN` times faster to be taken (and the packed vocabulary: `pick`).

    Every rank of a torch.distributed job gets rank 0's answer, so that one job decodes one way.
    """
    name = forced(option)
    if name is None:
        name = pick(measure(config, rows), logits_bytes=4 * rows * config.target_vocab_size)
    return rank_zeros(name)


def pick(seconds: dict[str, float], logits_bytes: int) -> str:
    """The backend `choose` takes for these measured step times, a step's float32 logits being logits_bytes:
    oneDNN's layers only where `ONEDNN_MARGIN` times faster than MKL's; then the packed vocabulary where it
    is faster, and by `PACKED_MARGIN` where it would replace MKL's buffer for more than `FRESH_LOGITS_FREE`."""
    name = "onednn" if "onednn" in seconds and seconds["onednn"] * ONEDNN_MARGIN < seconds["mkl"] else "mkl"
    packed = seconds.get(f"{name}+packed")
    margin = PACKED_MARGIN if name == "mkl" and logits_bytes > FRESH_LOGITS_FREE else 1.0
    return f"{name}+packed" if packed is not None and packed * margin < seconds[name] else name


def use_onednn(model: nn.Module) -> None:
    """Every nn.Linear of the encoder and decoder, and the pre-softmax projection, on oneDNN (in place)."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, child_name, OneDnnLinear(child))
    if type(model.output_proj) is OutputProjection:
        model.output_proj = OneDnnProjection(model.output_proj)
