"""Model configuration: one frozen dataclass with the paper's names, and presets as data.

`ModelConfig.preset("base")` gives Table 3's base model (§6.2), `"big"` its big model; `tiny` and
`small` are sizes for CPU work. The options that a released Marian checkpoint needs (activation,
sinusoid layout, logits bias, embedding scaling, tying) are fields here, so that loading one is a
matter of configuration, not of a second model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple


class StackShape(NamedTuple):
    """The sizes of one stack (§3.1, §3.2.2): N layers, h heads of d_k (queries, keys) and d_v (values), d_ff."""

    layers: int
    heads: int
    d_k: int
    d_v: int
    d_ff: int


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 37000  # shared source+target vocabulary (§5.1: ~37,000 BPE tokens En-De)
    tgt_vocab_size: int | None = None  # a separate target vocabulary; None = shared with source
    d_model: int = field(default=512, metadata={"help": "model width (§3)"})
    d_ff: int = field(default=2048, metadata={"help": "inner width of the FFN (eq. 2)"})
    n_heads: int = field(default=8, metadata={"help": "h, attention heads (§3.2.2)"})
    n_layers: int = field(default=6, metadata={"help": "N, encoder layers (and decoder layers)"})
    n_decoder_layers: int | None = None  # None = n_layers; released models may differ
    n_decoder_heads: int | None = None  # None = n_heads (Marian configurations may differ)
    d_decoder_ff: int | None = None  # None = d_ff
    d_k: int | None = field(default=None, metadata={"help": "query/key size per head; None = d_model / h (§3.2.2)"})
    d_v: int | None = field(default=None, metadata={"help": "value size per head; None = d_model / h"})
    p_drop: float = field(default=0.1, metadata={"help": "P_drop, residual/embedding dropout (§5.4)"})
    p_attn_drop: float = 0.0  # dropout on attention weights; not in the paper, off by default
    p_ffn_drop: float = 0.0  # dropout after the FFN activation; not in the paper, off by default
    max_len: int = 1024  # longest sequence the position table covers
    pad_id: int = 0
    bos_id: int = 1  # decoder start token (Marian starts from pad: set bos_id = pad_id)
    eos_id: int = 2
    unk_id: int = 3
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"  # learned: Table 3 row (E)
    sinusoid_layout: Literal["interleaved", "halves"] = "interleaved"  # paper; Marian: [sin | cos]
    activation: Literal["relu", "gelu", "swish"] = "relu"  # eq. 2 uses ReLU
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) (§3.4)
    share_embeddings: bool = True  # tie source and target embeddings (needs a shared vocabulary)
    tie_output: bool = True  # tie the pre-softmax projection to the target embedding (§3.4)
    final_logits_bias: bool = False  # a bias on the logits (Marian); the paper has none
    layer_norm_eps: float = 1e-5
    src_lang: str | None = None  # the languages the model translates between (training writes the recipe's)
    tgt_lang: str | None = None

    def __post_init__(self) -> None:
        for name, heads in (("n_heads", self.n_heads), ("n_decoder_heads", self.decoder_heads)):
            if heads > 0 and (self.d_k is None or self.d_v is None) and self.d_model % heads:
                raise ValueError(f"d_model {self.d_model} is not divisible by {name} {heads}; set d_k and d_v")
        if self.share_embeddings and self.tgt_vocab_size not in (None, self.vocab_size):
            raise ValueError("share_embeddings needs one vocabulary: tgt_vocab_size must equal vocab_size")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError("sinusoidal positions need an even d_model")

    @property
    def target_vocab_size(self) -> int:
        return self.tgt_vocab_size or self.vocab_size

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers or self.n_layers

    @property
    def decoder_heads(self) -> int:
        return self.n_decoder_heads or self.n_heads

    @property
    def encoder(self) -> StackShape:
        """The encoder's sizes; d_k = d_v = d_model / h unless set (§3.2.2; Table 3 rows A and B vary them)."""
        return self._stack(self.n_layers, self.n_heads, self.d_ff)

    @property
    def decoder(self) -> StackShape:
        """The decoder's sizes, the encoder's unless n_decoder_layers, n_decoder_heads or d_decoder_ff say otherwise."""
        return self._stack(self.decoder_layers, self.decoder_heads, self.d_decoder_ff or self.d_ff)

    def _stack(self, layers: int, heads: int, d_ff: int) -> StackShape:
        d_head = self.d_model // heads
        return StackShape(layers, heads, self.d_k or d_head, self.d_v or d_head, d_ff)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named size from PRESETS, with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model config fields: {', '.join(unknown)}")
        return cls(**values)


@dataclass(frozen=True)
class DecodeConfig:
    """How to search for a translation (§6.1): beam 4, GNMT length penalty alpha 0.6, input length + 50."""

    beam_size: int = field(default=4, metadata={"help": "beam width; 1 = greedy"})
    alpha: float = field(default=0.6, metadata={"help": "length penalty alpha"})
    length_penalty: Literal["gnmt", "power"] = "gnmt"  # gnmt: ((5+|Y|)/6)^alpha; power: |Y|^alpha (HF)
    extra_len: int = 50  # maximum output length = input length + extra_len (§6.1)
    max_len: int | None = None  # an absolute cap on output length as well (Marian's max_length)
    n_best: int = 1
    forced_eos: bool = False  # at its length limit a hypothesis may only write </s> (HF's forced_eos_token_id)
    sample: bool = False  # sampling instead of search
    temperature: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0  # 1 = no nucleus filter

    def replace(self, **changes: Any) -> DecodeConfig:
        return dataclasses.replace(self, **changes)


# Table 3 (§6.2): base N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; big 6, 1024, 4096, 16, 0.3.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, d_ff=256, n_heads=4, n_layers=2, p_drop=0.1),
    "small": dict(d_model=256, d_ff=1024, n_heads=4, n_layers=3, p_drop=0.1),
    "base": dict(d_model=512, d_ff=2048, n_heads=8, n_layers=6, p_drop=0.1),
    "big": dict(d_model=1024, d_ff=4096, n_heads=16, n_layers=6, p_drop=0.3),
}
