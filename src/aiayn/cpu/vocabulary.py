"""The vocabulary matrix held once in a form only decoding reads, and the two modules that read it.
Not in the paper: speed measures for CPU translation (docs/studies/translation-speed.md, "The vocabulary packed for oneDNN, held once").

§3.4 shares one (V, D) matrix between the embeddings and the pre-softmax projection. For decoding it
may be held packed (float32 for oneDNN: `packed.pack_float32`, chosen by `backend.choose` where it is
the faster) or as int8 rows (`quantize.Int8Vocabulary`); either way it is held once: the embeddings
read their rows out of it (`VocabularyEmbedding`) and the projection multiplies by it. The model's own
modules are swapped whole for these; the model's code does not change.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..model import Transformer
from ..model.embedding import TokenEmbedding
from .packed import PackedFloat32, pack_float32


class VocabularyEmbedding(nn.Module):
    """TokenEmbedding (§3.4) reading its rows from a vocabulary matrix held once (packed or int8)."""

    def __init__(self, vocabulary: PackedFloat32 | nn.Module, scale: float):
        super().__init__()
        self.vocabulary, self.scale = vocabulary, scale

    def forward(self, ids: Tensor) -> Tensor:
        return self.vocabulary.rows(ids) * self.scale  # (B, T) -> (B, T, D)


class PackedProjection(nn.Module):
    """The pre-softmax linear transformation (§3.4) through the packed vocabulary, with an optional bias.

    oneDNN writes the logits into a new tensor at each call (it takes no output buffer); `backend.pick`
    takes packing where that costs nothing measurable (a step's small logits) or where it still wins.
    """

    def __init__(self, vocabulary: PackedFloat32):
        super().__init__()
        self.vocabulary = vocabulary  # read by the embeddings too

    def forward(self, hidden: Tensor, bias: Tensor | None = None) -> Tensor:
        """hidden (..., D) -> logits (..., V)."""
        flat = hidden.reshape(-1, hidden.size(-1))  # (N, D)
        if flat.dtype != torch.float32:
            flat = flat.float()
        return self.vocabulary.product(flat.contiguous(), bias).view(*hidden.shape[:-1], -1)


def is_packed(model: Transformer) -> bool:
    """Whether the model's vocabulary is held packed (`pack_vocabulary` succeeded)."""
    return isinstance(model.output_proj, PackedProjection)


@torch.no_grad()
def pack_vocabulary(model: Transformer, rows: int, release: Callable[[], None] | None = None) -> bool:
    """The pre-softmax matrix packed for oneDNN's float32 product (for about `rows` rows), in place, and the
    embeddings that share it (§3.4) reading their rows from the packing. False, and the model unchanged,
    where this PyTorch cannot pack it or its packed layout is not one `packed.py` reads.

    release, if given, is called after each block of rows is packed: `aiayn.cpu.memory.MappedReads.release`, so
    that a matrix mapped from its file is never all in memory beside its packing (`layout.reader`).
    """
    matrix = model.output_proj.matrix  # (V, D): the target embedding's when tied
    packed = pack_float32(matrix.detach(), rows, release=release)
    if packed is None:
        return False
    for stack in (model.encoder, model.decoder):
        embed = stack.embed
        if isinstance(embed, TokenEmbedding) and embed.weight is matrix:
            stack.embed = VocabularyEmbedding(packed, embed.scale)
    model.output_proj = PackedProjection(packed)
    del matrix
    gc.collect()  # the plain matrix is no longer referenced: give it back now, before decoding allocates
    return True
