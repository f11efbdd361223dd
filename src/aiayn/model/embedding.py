"""Token embeddings scaled by sqrt(d_model) (§3.4) and positional encodings (§3.5)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig


def sinusoid_table(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same), §3.5: (max_len, d_model).

    layout "interleaved" is the paper's (sin and cos of one frequency side by side); "halves" puts
    all sines first and all cosines after, as Marian and tensor2tensor lay them out.
    """
    pos = torch.arange(max_len, dtype=torch.float64, device="cpu")[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device="cpu")  # (D/2,)
    angle = pos / 10000 ** (two_i / d_model)  # (L, D/2); wavelength of pair i is 2*pi*10000^(2i/D)
    if layout == "interleaved":
        table = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (L, D)
    elif layout == "halves":
        table = torch.cat([angle.sin(), angle.cos()], dim=-1)  # (L, D)
    else:
        raise ValueError(f"unknown sinusoid layout {layout!r}")
    return table.float()


class TokenEmbedding(nn.Embedding):
    """A learned table of d_model-wide rows, multiplied by sqrt(d_model) (§3.4)."""

    def __init__(self, vocab_size: int, config: ModelConfig):
        # On the meta device (a skeleton that saved tensors will fill) nothing is initialised: random
        # initialisers there run Python kernels that import torch's compiler modules (torch._dynamo).
        skeleton = torch.get_default_device().type == "meta"
        shape = (vocab_size, config.d_model)
        super().__init__(*shape, padding_idx=config.pad_id, _weight=torch.empty(shape) if skeleton else None)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        if not skeleton:
            nn.init.normal_(self.weight, std=config.d_model**-0.5)  # scaled rows have unit variance
            with torch.no_grad():
                self.weight[config.pad_id].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        return super().forward(ids) * self.scale  # (B, T) -> (B, T, D)


class Positions(nn.Module):
    """Positional encodings added at the bottom of both stacks (§3.5): sinusoids or learned (Table 3 E)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.max_len = config.max_len
        if config.positions == "learned":
            self.table = nn.Parameter(torch.randn(config.max_len, config.d_model) * config.d_model**-0.5)
        else:  # a fixed buffer, not saved: it is a function of the config
            if torch.get_default_device().type == "meta":  # a skeleton: Transformer.from_state_dict fills it
                table = torch.empty(config.max_len, config.d_model)
            else:
                table = sinusoid_table(config.max_len, config.d_model, config.sinusoid_layout)
                table = table.to(torch.get_default_device())
            self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Encodings of positions offset .. offset+length-1: (length, D)."""
        if offset + length > self.max_len:
            raise ValueError(f"sequence of {offset + length} positions is longer than max_len {self.max_len}")
        return self.table[offset : offset + length]


class OutputProjection(nn.Module):
    """The pre-softmax linear transformation (§3.4): logits = x W^T (+ a bias, Marian's; the paper has none).

    Tied (§3.4), W is the target embedding's matrix, read from that module at every call and not
    registered here, so that it is saved once, under the embedding's name.
    """

    def __init__(self, d_model: int, vocab_size: int, tied_to: TokenEmbedding | None = None):
        super().__init__()
        self._tied = (tied_to,)  # a tuple: a reference, not a submodule
        if tied_to is None:
            self.weight = nn.Parameter(torch.empty(vocab_size, d_model))  # (V, D)
            nn.init.xavier_uniform_(self.weight)

    @property
    def matrix(self) -> Tensor:
        """W (V, D): this module's own, or the tied embedding's."""
        tied = self._tied[0]
        return self.weight if tied is None else tied.weight

    def forward(self, hidden: Tensor, bias: Tensor | None = None) -> Tensor:
        return F.linear(hidden, self.matrix, bias)  # (..., D) -> (..., V)
