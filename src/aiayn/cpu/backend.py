"""Decoding's matrix products on the faster of the CPU's two float32 backends. Not in the paper: a speed measure.

PyTorch's CPU build runs `F.linear` on MKL's sgemm; oneDNN, which it also ships, is reached through
`torch.ops.mkldnn._linear_pointwise`. Which is faster for decoding's few-row products depends on the host, so
`choose` measures both on the model's own shapes (a few products, well under a second) when a `Translator`
loads, and takes oneDNN where it is clearly the faster (`ONEDNN_MARGIN`). With few rows (batch 1) the
vocabulary's product is the larger part of a step, and oneDNN runs it faster on a matrix packed once for it; so
the same measurement also times the packed vocabulary, and "+packed" is added where it makes the step's products
faster (by `PACKED_MARGIN` where its fresh logits each step are large). A backend can be forced by an option or by
the environment variable AIAYN_GEMM (mkl, onednn, mkl+packed, onednn+packed, onednn+gemv), so that a run can be
reproduced. Under torch.distributed every rank takes rank 0's choice. Both compute x W^T + b in float32: the
logits agree to rounding (tests/test_backend.py), the translations are the same. The measurements behind each
threshold: docs/studies/translation-speed.md and translation-memory.md.

- "mkl": matrices stored column-major (`layout.for_decoding`), so x W^T is MKL's NN product.
- "onednn": matrices kept as stored (row-major); every linear layer and the pre-softmax projection
  replaced by modules that call oneDNN with the same tensors (no second copy of any weight).
- "+gemv" (with oneDNN's layers): the products of a step with up to 4 rows (batch 1) on aiayn's own
  matrix-vector product (`gemv.py`), which reads every matrix as stored, the vocabulary's too; the logits
  go into one reused buffer. The products of a batch's every token stay on oneDNN.
- "+packed": every matrix oneDNN multiplies at a step packed once for its float32 product and held only
  so. The vocabulary matrix (§3.4: the embeddings' and the projection's), whose rows the embeddings read
  out of the packing (`vocabulary.py`, `packed.py`); with oneDNN's layers, the decoder's layer matrices
  too (with MKL's, they stay column-major for MKL).
"""

from __future__ import annotations

import ctypes
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..config import ModelConfig
from ..model import OutputProjection
from . import gemv
from .memory import trim_heap
from .onednn_caches import set_caches
from .packed import float32_available, reorder_float32

LAYER_BACKENDS = ("mkl", "onednn")  # what runs the linear layers (training's choice too: cpu/train_gemm.py)


@dataclass(frozen=True)
class Gemm:
    """Decoding's float32 products on a CPU: three independent choices, spelt "LAYERS[+packed|+gemv]" on the
    command line, in AIAYN_GEMM, in /api/model and in checkpoints (`str(gemm)`, `Gemm.parse`)."""

    layers: str = "mkl"  # what multiplies the linear layers: "mkl" or "onednn"
    # the matrices oneDNN multiplies at a step packed once for it: the vocabulary, and with oneDNN's layers theirs
    packed: bool = False
    gemv: bool = False  # a step's few-row products on aiayn's own product (`gemv.py`); with oneDNN's layers only

    def __post_init__(self) -> None:
        if self.layers not in LAYER_BACKENDS:
            raise ValueError(f"GEMM backend: the layers run on {' or '.join(LAYER_BACKENDS)}, not {self.layers!r}")
        if self.gemv and (self.packed or self.layers != "onednn"):
            raise ValueError("GEMM backend: +gemv goes with oneDNN's layers and plain matrices only (onednn+gemv)")

    @classmethod
    def parse(cls, name: str | Gemm) -> Gemm:
        """ "onednn+packed" -> Gemm("onednn", packed=True); a Gemm is returned as it is."""
        if isinstance(name, Gemm):
            return name
        layers, *extras = name.split("+")
        if any(extra not in ("packed", "gemv") for extra in extras) or len(set(extras)) != len(extras):
            raise ValueError(f"unknown GEMM backend {name!r}; choose auto, {', '.join(BACKENDS)}")
        return cls(layers, "packed" in extras, "gemv" in extras)

    def __str__(self) -> str:
        return self.layers + "+packed" * self.packed + "+gemv" * self.gemv


BACKENDS = tuple(
    str(g)
    for g in (
        Gemm("mkl"),
        Gemm("onednn"),
        Gemm("mkl", packed=True),
        Gemm("onednn", packed=True),
        Gemm("onednn", gemv=True),
    )
)
ENV = "AIAYN_GEMM"
# oneDNN is taken only where its products measure at least this much faster than MKL's. The products alone do not
# show one cost: oneDNN returns the (rows, V) logits as a new tensor each step, where the MKL path writes them into
# one buffer (`projection.py`), and the C heap may hand that memory back and fault it in again. Where a step's
# logits are small (up to `SMALL_LOGITS_BYTES`, below) that cost is nothing and the faster is taken.
ONEDNN_MARGIN = 1.25
# The packed vocabulary too returns each step's logits as a new tensor. Where they are small that costs nothing
# measurable, and packing is taken wherever it measures faster: up to `SMALL_LOGITS_BYTES` bytes of logits, or where
# the layers' backend (oneDNN) returns fresh logits anyway. Larger, in place of MKL's reused buffer, it must measure
# `PACKED_MARGIN` times faster.
SMALL_LOGITS_BYTES = 8 << 20
PACKED_MARGIN = ONEDNN_MARGIN
FEW_ROWS = 32  # up to this many rows a step's products are bound by memory: `measure` reads the whole vocabulary
# oneDNN compiles and keeps a kernel for each shape it multiplies: the encoder's products (and the encoder-decoder
# attention's W^K, W^V) have as many rows as a batch has tokens, new at nearly every batch, so each would compile
# anew and fill its caches. Up to `BUCKETED_ROWS` rows those products run padded to a multiple of `ROW_BUCKET`
# rows (each row of x W^T is its own), so at most a few shapes are compiled; the padding rows cost next to nothing
# there, where the products are bound by reading the matrices. More rows run `BUCKETED_ROWS` at a time, the last
# piece padded the same way.
ROW_BUCKET = 16
BUCKETED_ROWS = 128


def layers_of(name: str | Gemm) -> str:
    """The backend of the linear layers: "mkl" or "onednn"."""
    return Gemm.parse(name).layers


def packs_vocabulary(name: str | Gemm) -> bool:
    return Gemm.parse(name).packed


def uses_gemv(name: str | Gemm) -> bool:
    """Whether a step's few-row products run on aiayn's own kernel (`gemv.py`)."""
    return Gemm.parse(name).gemv


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) W^T (+ b) on oneDNN; W (out, in) as stored."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


# oneDNN's two kernel caches (`aiayn.cpu.onednn_caches`) for a process that only translates. When sentences end at
# their own lengths, a batch's row count falls step by step to 1, and each count compiles the step's products
# anew: fewer entries keep fewer of those kernels at no measured cost in time. Training, which reuses a step's
# kernels at the next step, keeps 64.
TRANSLATION_CACHE_ENTRIES = 16


def caches_for_translation() -> list[str]:
    """Size oneDNN's caches at `TRANSLATION_CACHE_ENTRIES` for a process that only translates (the translate,
    evaluate and serve commands call it before they load a model); a variable the user set, in the environment
    or after importing aiayn, is kept. Returns the variables set. oneDNN reads them when it first runs in the
    process, so a call after the first oneDNN product changes nothing."""
    return set_caches(TRANSLATION_CACHE_ENTRIES)


class OneDnnLinear(nn.Module):
    """nn.Linear's product on oneDNN, with the layer's own bias and weight (inference only).

    With rows, the weight is packed once for oneDNN's product with about that many rows and held only
    so: an opaque tensor (not a parameter) that nothing but oneDNN reads. With bucketed, products run
    `BUCKETED_ROWS` rows at a time, each piece padded to a multiple of `ROW_BUCKET` rows (for the products of
    a batch's every token, whose row counts vary from batch to batch): oneDNN compiles a few shapes only.
    """

    def __init__(self, linear: nn.Linear, rows: int | None = None, bucketed: bool = False):
        super().__init__()
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bucketed = bucketed
        self.packed = None if rows is None else reorder_float32(linear.weight, rows)
        if self.packed is None:
            self.weight = linear.weight

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight if self.packed is None else self.packed
        rows = x.numel() // self.in_features
        if not self.bucketed or rows == 0 or (rows <= BUCKETED_ROWS and rows % ROW_BUCKET == 0):
            return onednn_linear(x, weight, self.bias)
        flat = x.reshape(rows, self.in_features)  # (R, in)
        pieces = [self.bucket(piece, weight) for piece in flat.split(BUCKETED_ROWS)]  # (<= BUCKETED_ROWS, out) each
        y = pieces[0] if len(pieces) == 1 else torch.cat(pieces)  # (R, out)
        return y.view(*x.shape[:-1], self.out_features)

    def bucket(self, x: Tensor, weight: Tensor) -> Tensor:
        """x (r, in), r <= BUCKETED_ROWS, times the weight, padded to a multiple of ROW_BUCKET rows: (r, out)."""
        padded = -x.size(0) % ROW_BUCKET
        if padded:
            x = torch.cat([x, x.new_zeros(padded, self.in_features)])  # (r', in)
        y = onednn_linear(x, weight, self.bias)  # (r', out)
        return y[: y.size(0) - padded] if padded else y


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


def forced(option: str | None = None, decoding: bool = True) -> str | None:
    """The backend asked for by the option, else by AIAYN_GEMM; None = measure. An unknown name is an error.
    decoding=False (training, which takes only the layers' backend): aiayn's own product is not built for it."""
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
    if decoding and uses_gemv(name) and gemv.kernel() is None:
        raise ValueError(f"GEMM backend {name}: aiayn's product is not available here: {gemv.why_not()}")
    return name


def measure(config: ModelConfig, rows: int, repeats: int = 3) -> dict[str, float]:
    """Seconds per decoding step's products on each backend: the decoder layers' matrices and the vocabulary's.

    Matrices of the model's shapes stand in for its weights (rates depend on shapes, not on values): the
    (out, in) matrices a decoder layer multiplies at a step (`step_matrices`), each by `rows` rows, and the
    vocabulary, plain and (where oneDNN can) packed; with up to `gemv.MAX_ROWS` rows (where aiayn's product
    is built) also on that product. With up to `FEW_ROWS` rows the products stream their
    matrices from memory at every step, so every layer's are measured and the whole vocabulary: a
    layer's or a slice's stay in the cache and show a rate decoding does not get. With more
    rows the products are bound by arithmetic: one layer's matrices and 16,384 of the vocabulary's rows
    show the rate, scaled to the whole.
    """
    V, layers = config.target_vocab_size, config.decoder.layers
    few = rows <= FEW_ROWS
    measured, copies = (V, layers) if few else (min(V, 16384), 1)
    with torch.inference_mode():
        products = {name: layers / copies * s for name, s in layer_seconds(config, rows, copies, repeats).items()}
        trim_heap()  # the layers' stand-ins freed (glibc keeps large freed blocks): not under the vocabulary's
        projection = {
            name: V / measured * s for name, s in projection_seconds(rows, config.d_model, measured, repeats).items()
        }
    seconds = {name: products[name] + projection[name] for name in LAYER_BACKENDS if name in products}
    if "packed" in projection:
        seconds["mkl+packed"] = products["mkl"] + projection["packed"]
        if "packed" in products:
            seconds["onednn+packed"] = products["packed"] + projection["packed"]
    if "gemv" in products and "onednn" in seconds:
        seconds["onednn+gemv"] = products["gemv"] + projection["gemv"]
    free_mkl_buffers()  # what MKL kept for its next product, which it would keep for good where oneDNN wins
    trim_heap()  # and the vocabulary's, before the model loads
    return seconds


def step_matrices(config: ModelConfig) -> list[tuple[int, int]]:
    """(out, in) of the matrices one decoder layer multiplies at each step: self-attention's W^Q, W^K, W^V
    and W^O, encoder-decoder attention's W^Q and W^O (its keys and values are projected once a batch),
    and the FFN's W_1 and W_2 (§3.2.2, §3.3)."""
    D, (_, h, d_k, d_v, d_ff) = config.d_model, config.decoder
    return [(h * d_k, D), (h * d_k, D), (h * d_v, D), (D, h * d_v), (h * d_k, D), (D, h * d_v), (d_ff, D), (D, d_ff)]


def layer_seconds(config: ModelConfig, rows: int, copies: int, repeats: int) -> dict[str, float]:
    """Seconds of rows x each of `copies` decoder layers' step matrices: "mkl" column-major, "onednn" as
    stored, "packed" packed for oneDNN. One backend's matrices at a time, filled with a constant (random
    values would cost more than the products)."""
    generator = torch.Generator().manual_seed(0)
    shapes = step_matrices(config) * copies
    inputs = {d_in: torch.randn(rows, d_in, generator=generator) for _, d_in in shapes}
    layouts = {"mkl": lambda w: w.t().contiguous().t()}  # MKL's layout (layout.column_major)
    if onednn_available():
        layouts["onednn"] = lambda w: w
    if float32_available():
        layouts["packed"] = lambda w: reorder_float32(w, rows)
    if gemv_measured(rows):
        layouts["gemv"] = lambda w: w
    seconds = {}
    for name, lay_out in layouts.items():
        matrices = [lay_out(torch.full(shape, 0.5)) for shape in shapes]
        if name == "mkl":
            run = lambda: [inputs[w.size(1)] @ w.t() for w in matrices]
        elif name == "gemv":
            run = lambda: [gemv.product(inputs[w.size(1)], w) for w in matrices]
        else:
            run = lambda: [onednn_linear(inputs[d_in], w, None) for w, (_, d_in) in zip(matrices, shapes)]
        seconds[name] = best_seconds(run, repeats)
        matrices = run = None  # one layout's matrices at a time
    return seconds


def projection_seconds(rows: int, D: int, V: int, repeats: int) -> dict[str, float]:
    """Seconds of (rows, D) times a (V, D) matrix: "mkl" column-major, "onednn" row-major, "packed" packed for oneDNN.

    One matrix at a time besides the one it is packed from (at most two vocabulary-sized matrices: loading the
    model, after this, takes more), filled with a constant: random values would cost more than the products.
    """
    x, seconds = torch.randn(rows, D, generator=torch.Generator().manual_seed(0)), {}
    plain = torch.full((V, D), 0.5)  # (V, D), as stored
    if onednn_available():
        seconds["onednn"] = best_seconds(lambda: onednn_linear(x, plain, None), repeats)
    if float32_available():  # packed as `packed.pack_float32` packs the vocabulary
        packed = reorder_float32(plain, rows)
        seconds["packed"] = best_seconds(lambda: onednn_linear(x, packed, None), repeats)
        del packed
    if gemv_measured(rows):  # into one buffer, as `gemv.GemvProjection` writes a step's logits
        out = torch.empty(rows, V)
        seconds["gemv"] = best_seconds(lambda: gemv.product(x, plain, None, out), repeats)
        del out
    plain = None
    columns = torch.full((D, V), 0.5).t()  # MKL's layout (layout.column_major), made without a source
    seconds["mkl"] = best_seconds(lambda: x @ columns.t(), repeats)
    return seconds


def free_mkl_buffers() -> bool:
    """Give back the buffers MKL keeps for its next products (MKL's `mkl_free_buffers`); False where this
    PyTorch has no MKL to ask. MKL packs its operands into buffers from its own pool and keeps them: after
    `measure` they would stay resident for good where oneDNN then decodes (docs/studies/translation-memory.md,
    "What measuring the backends leaves"). MKL frees only buffers no product is using, and allocates them
    again when it next multiplies."""
    free = _mkl_free_buffers()
    if free is None:
        return False
    free()
    return True


@functools.lru_cache(maxsize=1)
def _mkl_free_buffers():
    """MKL's function that frees its pool, from the library PyTorch already loaded (PyTorch's Linux x86-64
    builds link MKL into libtorch_cpu.so; other builds may link it dynamically, where the same lookup
    finds it among that library's dependencies). Nothing is loaded: RTLD_NOLOAD only opens a library
    the process already has."""
    if not torch.backends.mkl.is_available() or not hasattr(os, "RTLD_NOLOAD"):
        return None
    library = None
    for name in (
        "libtorch_cpu.so",
        str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"),
    ):  # by soname, wherever it is
        try:
            library = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            break
        except OSError:  # another name (macOS), or not loaded
            continue
    if library is None:
        return None
    for name in ("MKL_Free_Buffers", "mkl_free_buffers", "mkl_serv_free_buffers"):  # mkl_free_buffers() calls the last
        free = getattr(library, name, None)
        if free is not None:
            free.argtypes, free.restype = [], None
            return free
    return None


def gemv_measured(rows: int) -> bool:
    """Whether the measure times aiayn's own product too: few enough rows, oneDNN's layers beside it, and built here."""
    return rows <= gemv.MAX_ROWS and onednn_available() and gemv.kernel() is not None


def best_seconds(run, repeats: int) -> float:
    """The fastest of `repeats` timed calls of run(), after one untimed call (first-call set-up is not the rate)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best


def rank_zero_choice(name: str) -> str:
    """Under torch.distributed, rank 0's name on every rank, so that one job computes one way."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        shared = [name]
        dist.broadcast_object_list(shared, src=0)
        name = shared[0]
    return name


def choose(config: ModelConfig, rows: int, option: str | None = None) -> str:
    """The backend for decoding this model on this CPU: forced (option, AIAYN_GEMM) or the faster measured,
    by the margins of `pick` where a step's logits are large.

    Every rank of a torch.distributed job gets rank 0's answer, so that one job decodes one way.
    """
    name = forced(option)
    if name is None and stand_in_bytes(config) > MEASURE_BYTES:  # too big to make stand-ins of here (or a mistyped
        name = "mkl"  # config, which loading then names, rather than the measure asking for terabytes first)
    if name is None:
        name = pick(measure(config, rows), logits_bytes=4 * rows * config.target_vocab_size)
    return rank_zero_choice(name)


# The measure's stand-in matrices at most (opus-mt's: 0.2 GiB): a quarter of this machine's memory, 16 GiB at most.
MEASURE_BYTES = (
    min(16 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4) if hasattr(os, "sysconf") else 4 << 30
)


def stand_in_bytes(config: ModelConfig) -> int:
    """Bytes of the float32 matrices a step multiplies, which `measure` makes stand-ins of: every decoder layer's
    and the vocabulary."""
    layer = sum(o * i for o, i in step_matrices(config))
    return 4 * (config.decoder.layers * layer + config.target_vocab_size * config.d_model)


def pick(seconds: dict[str, float], logits_bytes: int) -> str:
    """The backend `choose` takes for these measured step times, a step's float32 logits being logits_bytes:
    oneDNN's layers where faster than MKL's, `ONEDNN_MARGIN` times where their fresh logits would take the
    place of MKL's buffer for more than `SMALL_LOGITS_BYTES`; then the packed vocabulary where it is faster,
    and by `PACKED_MARGIN` where it would replace MKL's buffer for more than `SMALL_LOGITS_BYTES`; last, aiayn's
    own product where measured (up to `gemv.MAX_ROWS` rows) and faster than that (its logits go into a buffer)."""
    large = logits_bytes > SMALL_LOGITS_BYTES
    margin = ONEDNN_MARGIN if large else 1.0
    name = "onednn" if "onednn" in seconds and seconds["onednn"] * margin < seconds["mkl"] else "mkl"
    packed = seconds.get(f"{name}+packed")
    margin = PACKED_MARGIN if name == "mkl" and large else 1.0
    if packed is not None and packed * margin < seconds[name]:
        name = f"{name}+packed"
    own = seconds.get("onednn+gemv")
    return "onednn+gemv" if own is not None and own < seconds[name] else name


def use_onednn(model: nn.Module, packed_rows: int | None = None, own: bool = False) -> None:
    """Every nn.Linear of the encoder and decoder, and the pre-softmax projection, on oneDNN (in place);
    with packed_rows, the decoder's matrices packed for products with about that many rows (`OneDnnLinear`),
    one at a time, each plain matrix let go as its packing replaces it. The products of a batch's every
    token (the encoder's, and the encoder-decoder attention's W^K and W^V) run row-bucketed (`ROW_BUCKET`).
    With own, the step's products (the decoder's other layers and the pre-softmax projection) run on aiayn's
    own product up to `gemv.MAX_ROWS` rows (`gemv.GemvLinear`, `gemv.GemvProjection`), on oneDNN above."""
    once_a_batch = {id(m) for m in model.encoder.modules()}
    once_a_batch |= {
        id(m) for layer in model.decoder.layers for m in (layer.cross_attn.k_proj, layer.cross_attn.v_proj)
    }

    def swap(module: nn.Module, rows: int | None, in_decoder: bool) -> None:
        for child_name in [name for name, _ in module.named_children()]:  # names: no list keeps a replaced child
            child = getattr(module, child_name)
            if type(child) is nn.Linear and own and in_decoder and id(child) not in once_a_batch:
                setattr(module, child_name, gemv.GemvLinear(child))
            elif type(child) is nn.Linear:
                setattr(module, child_name, OneDnnLinear(child, rows, id(child) in once_a_batch))
                if rows is not None:
                    del child
                    trim_heap()  # the plain matrix just freed, before the next packing is made beside it
            else:
                swap(child, packed_rows if child is model.decoder else rows, in_decoder or child is model.decoder)

    swap(model, None, False)
    if type(model.output_proj) is OutputProjection:
        model.output_proj = gemv.GemvProjection(model.output_proj) if own else OneDnnProjection(model.output_proj)
