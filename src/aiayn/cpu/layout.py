"""A model made ready for decoding on a CPU. Not in the paper: speed measures (benchmarks/translate.py).

Each decoding step multiplies a few rows (the live hypotheses: 1 to 4 x batch) by every weight
matrix. Stored column-major (transposed), W.t() is a contiguous (in, out) matrix, so x W^T runs
as MKL's plain NN product, faster with a few rows than with the (out, in) rows training uses
(docs/studies/translation-speed.md). The shared embedding and pre-softmax matrix (§3.4) is laid out the same
way: the product reads it whole at every step, the lookup only a column per token. Values, shapes
and names stay the same; only strides change.

`aiayn.weights.read_safetensors(column_major=True)` reads weights straight into this layout;
`for_decoding` converts the rest (a model built in memory, a .bin checkpoint) and puts decoding's
own modules in place of the model's where they compute the same thing faster at a step: the
buffered pre-softmax projection (`projection.py`) and the decoder's two attentions (`attention.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch
from torch import Tensor, nn

from ..model import DotProductAttention, OutputProjection, Transformer
from ..weights import Reader, read_safetensors
from .backend import Gemm, use_onednn
from .memory import MappedReads
from .projection import BufferedProjection
from .query_attention import OneQueryAttention, SourceAttention
from .vocabulary import is_packed, pack_vocabulary


def is_column_major(t: Tensor) -> bool:
    """A matrix whose transpose is contiguous."""
    return t.dim() == 2 and t.t().is_contiguous()


def column_major(t: Tensor) -> Tensor:
    """The same matrix stored transposed (a copy unless it already is); other tensors unchanged."""
    return t.t().contiguous().t() if t.dim() == 2 and not is_column_major(t) else t


@torch.no_grad()
def for_decoding(
    model: Transformer, gemm: str | Gemm = "mkl", rows: int = 4, release: Callable[[], None] | None = None
) -> Transformer:
    """The model, in place, made ready for decoding: eval mode, and on a CPU decoding's own modules in
    place (the decoder's two attentions written out where faster; the projection into a buffer), an all-zero logits bias (Marian
    checkpoints carry one) dropped, which adds nothing but a pass over the (N, V) logits at every
    step, and the matrices laid out for the GEMM backend (`backend.py`): column-major for "mkl",
    as stored with oneDNN's modules for "onednn"; with "+packed", the vocabulary packed for oneDNN's
    product with about `rows` rows (`vocabulary.py`; kept plain where it cannot be packed; release is
    passed on to `pack_vocabulary`) and, with oneDNN's layers and a packed vocabulary, the decoder's
    matrices too (`backend.use_onednn`); with "+gemv", a step's few-row products on aiayn's own product
    (`gemv.py`). The model must not be trained afterwards.
    """
    model.eval()
    if next(model.parameters()).device.type != "cpu":
        return model
    choice = Gemm.parse(gemm)
    if choice.packed and type(model.output_proj) is OutputProjection:  # first: the plain matrix is not laid out
        pack_vocabulary(model, rows, release)
    packed_rows = rows if choice.packed and is_packed(model) else None  # oneDNN's layers packed as well
    layout = column_major if choice.layers == "mkl" else row_major
    for module in model.modules():  # a tied embedding is one module, converted once
        for name, param in list(module.named_parameters(recurse=False)):
            if param.dim() == 2 and layout(param) is not param:
                setattr(module, name, nn.Parameter(layout(param), requires_grad=False))
    if model.logits_bias is not None and not model.logits_bias.any():
        model.logits_bias = None
    if choice.layers == "onednn":
        use_onednn(model, packed_rows, choice.gemv)
    elif type(model.output_proj) is OutputProjection:  # not already replaced (int8, or a second call)
        model.output_proj = BufferedProjection(model.output_proj)
    for layer in model.decoder.layers:
        attention = layer.self_attn.attention
        if type(attention) is DotProductAttention:
            layer.self_attn.attention = OneQueryAttention(attention.p_drop)
        attention = layer.cross_attn.attention
        if type(attention) is DotProductAttention:
            layer.cross_attn.attention = SourceAttention(attention.p_drop)
    return model.eval()  # the modules put in place too: a new module is made in training mode (attention dropout)


def for_decoding_mapped(model: Transformer, gemm: str | Gemm, rows: int, maps: MappedReads) -> str:
    """`for_decoding` for a model read with `reader(gemm, ..., maps)`, after which nothing of it stays in maps'
    files; returns the backend taken: gemm, less "+packed" where the vocabulary's layout could not be read."""
    for_decoding(model, gemm, rows, release=maps.release)
    maps.detach(model)  # the vocabulary is packed by now; a matrix that could not be is copied out
    choice = Gemm.parse(gemm)
    return str(replace(choice, packed=False)) if choice.packed and not is_packed(model) else str(choice)


def reader(gemm: str | Gemm, vocab_size: int, maps: MappedReads) -> Reader:
    """How to read a model's weights for decoding with this backend (`backend.py`): matrices column-major
    for MKL's layers; with "+packed", the (vocab_size, D) vocabulary left mapped in maps, to be packed a
    block at a time (`vocabulary.pack_vocabulary`, then `maps.detach`): never a second copy in memory."""
    choice = Gemm.parse(gemm)
    column = choice.layers == "mkl"
    if not choice.packed:
        return partial(read_safetensors, column_major=column)
    return partial(
        read_safetensors,
        column_major=column,
        maps=maps,
        mapped=lambda shape: len(shape) == 2 and shape[0] == vocab_size,
    )


def row_major(t: Tensor) -> Tensor:
    """The same matrix stored row by row (a copy only if it was column-major)."""
    return t.contiguous() if t.dim() == 2 and is_column_major(t) and not t.is_contiguous() else t
