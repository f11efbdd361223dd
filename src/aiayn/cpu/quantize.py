"""int8 weights for CPU translation. Not in the paper: a speed and memory option, measured by
benchmarks/translate.py (BLEU within 0.5 of float32 is the bar).

Every linear layer of the encoder and decoder gets PyTorch's dynamic quantisation (int8 weights with
one scale per output row, activations quantised per batch). The vocabulary matrix, shared by the
embeddings and the pre-softmax projection (§3.4), is held once, as int8 rows with a scale each
(`Int8Vocabulary`): lookups dequantise the rows they read, and the projection multiplies int8 by
int8 straight into a logits buffer of its own (`projection.LogitsBuffer`), so the logits of a step
take no fresh memory, nor its page faults (docs/studies/translation-int8.md). On x86 builds the matrix is held
packed for oneDNN's int8 product, faster than `torch._int_mm` on plain rows (`packed.py`). The model's
modules are swapped whole for these; the model's code does not change.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..model import Transformer
from ..model.embedding import TokenEmbedding
from .packed import pack
from .projection import LogitsBuffer
from .vocabulary import VocabularyEmbedding


class Int8Vocabulary(nn.Module):
    """A (V, D) vocabulary matrix as int8 rows times a float scale per row (symmetric, max |w| -> 127).

    Held once: where PyTorch has oneDNN's int8 product, packed for it (`packed.pack`; the lookups
    read their rows out of the packing), else as plain rows multiplied by `torch._int_mm`.
    """

    def __init__(
        self, weight: Tensor, rows_at_once: int = 1024, release: Callable[[], None] | None = None, onednn: bool = True
    ):
        """weight (V, D) float; release, if given, is called after each block of rows_at_once rows (see
        quantize_int8), so that a mapped matrix is never all in memory while it is quantised; onednn:
        False keeps the plain rows and torch._int_mm even where oneDNN is available."""
        super().__init__()
        V, D = weight.shape
        plain = torch.empty(V, D, dtype=torch.int8)  # (V, D)
        self.register_buffer("scale", torch.empty(V))  # (V,)
        with torch.no_grad():
            for start in range(0, V, rows_at_once):  # a block at a time: no float copy of the whole matrix
                block = weight[start : start + rows_at_once].float()
                scale = block.abs().amax(dim=1).clamp(min=1e-12) / 127
                plain[start : start + rows_at_once] = torch.round(block / scale[:, None]).to(torch.int8)
                self.scale[start : start + rows_at_once] = scale
                if release is not None:
                    release()
        self.packed = pack(plain) if onednn else None  # if packed, the plain rows are dropped
        self.register_buffer("weight", None if self.packed is not None else plain)

    @property
    def shape(self) -> tuple[int, int]:
        return self.scale.size(0), (self.packed.dim if self.packed is not None else self.weight.size(1))

    def int8_rows(self, ids: Tensor) -> Tensor:
        """The int8 rows of ids (...) -> (..., D)."""
        return self.packed.rows(ids) if self.packed is not None else self.weight[ids]

    def rows(self, ids: Tensor) -> Tensor:
        """The float rows of ids (...) -> (..., D)."""
        return self.int8_rows(ids).float() * self.scale[ids].unsqueeze(-1)

    def product(self, x: Tensor, out: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
        """x (N, D) float times the matrix transposed, plus bias (V,) if given: (N, V), written into
        out (contiguous float32) if given.

        x is quantised with one scale for the whole batch (as PyTorch's dynamic quantisation does);
        int8 x int8 products sum exactly into int32, then take both scales.
        """
        N = x.size(0)
        x_scale = x.abs().amax().clamp(min=1e-12) / 127
        out = torch.empty(N, self.scale.size(0)) if out is None else out  # (N, V) float32
        if self.packed is not None:  # oneDNN adds the product to out: start it at the bias or zero
            if bias is None:
                out.zero_()
            else:
                out.copy_(bias.expand_as(out))
            return self.packed.product(x, float(x_scale), self.scale, out)
        x_int8 = torch.round(x / x_scale).to(torch.int8)  # (N, D)
        acc = out.view(torch.int32)  # the int32 sums go into out's memory, then become floats in place
        torch._int_mm(x_int8, self.weight.t(), out=acc)
        out.copy_(acc).mul_(self.scale * x_scale)
        return out if bias is None else out.add_(bias)


class Int8Projection(nn.Module):
    """The pre-softmax linear transformation (§3.4) through an Int8Vocabulary, with an optional bias."""

    def __init__(self, vocabulary: Int8Vocabulary, bias: Tensor | None = None):
        super().__init__()
        self.vocabulary = vocabulary
        self.register_buffer("bias", None if bias is None or not bias.any() else bias.detach().float().clone())
        self.logits = LogitsBuffer()

    def forward(self, hidden: Tensor, bias: Tensor | None = None) -> Tensor:
        """hidden (..., D) -> logits (..., V); for hidden (N, D), in this module's buffer (valid until the next call)."""
        V = self.vocabulary.shape[0]
        out = self.logits.rows(hidden.size(0), V, hidden.device) if hidden.dim() == 2 else None
        logits = self.vocabulary.product(hidden.reshape(-1, hidden.size(-1)), out, self.bias).view(
            *hidden.shape[:-1], V
        )
        return logits if bias is None else logits.add_(bias)


@torch.no_grad()
def quantize_int8(model: Transformer, release: Callable[[], None] | None = None) -> Transformer:
    """The model with int8 weights, in place (eval mode, CPU only); it can no longer be trained.

    release, if given, is called after each block of the vocabulary and after each linear layer, once
    their float weights are no longer needed: `aiayn.cpu.memory.MappedReads.release`, so that loading holds
    at most one block or one layer's matrix in float32 besides the int8 weights.
    """
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 weights run on the CPU only")
    tables: dict[int, Int8Vocabulary] = {}  # a shared embedding matrix becomes one int8 table
    for stack in (model.encoder, model.decoder):
        embed = stack.embed
        if isinstance(embed, TokenEmbedding):
            if id(embed.weight) not in tables:
                tables[id(embed.weight)] = Int8Vocabulary(embed.weight, release=release)
            stack.embed = VocabularyEmbedding(tables[id(embed.weight)], embed.scale)
    vocabulary = (
        model.decoder.embed.vocabulary
        if model.config.tie_output
        else Int8Vocabulary(model.output_proj.matrix, release=release)
    )
    model.output_proj = Int8Projection(vocabulary, model.logits_bias)
    model.logits_bias = None
    with warnings.catch_warnings():  # torch.ao's eager quantisation warns that it is deprecated
        warnings.simplefilter("ignore")
        for layer in (*model.encoder.layers, *model.decoder.layers):
            _quantize_linears(layer, release)
    gc.collect()
    return model.eval()  # the modules put in place too: a new module is made in training mode


def _quantize_linears(module: nn.Module, release: Callable[[], None] | None) -> None:
    """Every nn.Linear inside module replaced by PyTorch's dynamic int8 linear, one scale per output row;
    release (if given) called after each, its float weights freed as we go."""
    for name, child in list(module.named_children()):
        if type(child) is nn.Linear:
            if child.bias is not None:  # the int8 layer keeps this very tensor: make it one of its own
                child.bias = nn.Parameter(child.bias.detach().clone(), requires_grad=False)
            child.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
            setattr(module, name, torch.ao.nn.quantized.dynamic.Linear.from_float(child))
            if release is not None:
                release()
        else:
            _quantize_linears(child, release)
