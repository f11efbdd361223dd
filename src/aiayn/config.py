"""Model configuration: one frozen dataclass with the paper's names, and presets as data.

`ModelConfig.preset("base")` gives Table 3's base model (§6.2), `"big"` its big model; `tiny` and
`small` are sizes for CPU work. The options that a released Marian checkpoint needs (activation,
sinusoid layout, logits bias, embedding scaling, tying) are fields here, so that loading one is a
matter of configuration, not of a second model.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
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
        check_fields(self, MODEL_RANGES)
        for name in ("pad_id", "eos_id", "unk_id"):
            if getattr(self, name) >= self.vocab_size:
                raise ValueError(f"{name} = {getattr(self, name)}: not below vocab_size {self.vocab_size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(self, name) >= self.target_vocab_size:
                raise ValueError(
                    f"{name} = {getattr(self, name)}: not below the target vocabulary's size {self.target_vocab_size}"
                )
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
        return cls(**_known_fields(cls, values, "model config"))


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

    def __post_init__(self) -> None:
        check_fields(self, DECODE_RANGES)

    def replace(self, **changes: Any) -> DecodeConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DecodeConfig:
        return cls(**_known_fields(cls, values, "decode config"))


# The allowed range of each number (low, high; None = unbounded; POSITIVE: above 0), checked with its type
# in __post_init__: a config read from a file or a recipe is refused with the field's name, not later.
POSITIVE = (0, None)
MODEL_RANGES: dict[str, tuple[float, float | None]] = {
    # Upper bounds far beyond any real model, so that a mistyped size is refused by name rather than asking
    # the allocator for terabytes: 16.7M pieces, 1M positions (the position table is max_len x d_model).
    "vocab_size": (1, 1 << 24),
    "tgt_vocab_size": (1, 1 << 24),
    "d_model": (1, None),
    "d_ff": (1, None),
    "n_heads": (1, None),
    "n_layers": (1, None),
    "n_decoder_layers": (1, None),
    "max_len": (1, 1 << 20),
    "d_k": (1, None),
    "d_v": (1, None),
    "n_decoder_heads": (1, None),
    "d_decoder_ff": (1, None),
    "p_drop": (0, 1),
    "p_attn_drop": (0, 1),
    "p_ffn_drop": (0, 1),
    "pad_id": (0, None),
    "bos_id": (0, None),
    "eos_id": (0, None),
    "unk_id": (0, None),
    "layer_norm_eps": POSITIVE,
}
DECODE_RANGES: dict[str, tuple[float, float | None]] = {
    "beam_size": (1, None),
    "extra_len": (0, None),
    "max_len": (1, None),
    "n_best": (1, None),
    "temperature": POSITIVE,
    "top_k": (0, None),
    "top_p": (0, 1),
}
OPEN_BELOW = {"layer_norm_eps", "temperature", "top_p", "lr_factor"}  # above their low, not equal to it
OPEN_ABOVE = {"beta1", "beta2", "label_smoothing", "cooldown", "bpe_dropout"}  # below their high, not equal to it


def check_fields(config: Any, ranges: dict[str, tuple[float, float | None]]) -> None:
    """Every field of a config dataclass has its annotated type, and every number its range: a ValueError naming it."""
    hints = _type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not _has_type(value, hints[f.name]):
            raise ValueError(f"{f.name} = {value!r}: expected {_type_name(hints[f.name])}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value) or abs(value) >= 2**31:  # beyond int32, sizes overflow torch's int64 products
            raise ValueError(f"{f.name} = {value!r}: must be a finite number below 2**31")
        if f.name in ranges:
            low, high = ranges[f.name]
            above = value > low if f.name in OPEN_BELOW else value >= low
            below = high is None or (value < high if f.name in OPEN_ABOVE else value <= high)
            if not (above and below):
                bound = f"{'above' if f.name in OPEN_BELOW else 'at least'} {low}"
                if high is not None:
                    bound += f" and {'below' if f.name in OPEN_ABOVE else 'at most'} {high}"
                raise ValueError(f"{f.name} = {value!r}: must be {bound}")


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _has_type(value: Any, hint: Any) -> bool:
    """isinstance for the hints configs use: int (not bool), float (an int will do), bool, str, X | None, Literal."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, arg) for arg in typing.get_args(hint))
    if origin is Literal:
        return isinstance(value, str) and value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _known_fields(cls: type, values: Any, what: str) -> dict[str, Any]:
    """values as keyword arguments of cls: a mapping whose keys are all field names."""
    if not isinstance(values, dict):
        raise ValueError(f"a {what} is a mapping of field names to values, not {type(values).__name__}")
    unknown = sorted(str(k) for k in set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown {what} fields: {', '.join(unknown)}")
    return values


# Table 3 (§6.2): base N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; big 6, 1024, 4096, 16, 0.3.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, d_ff=256, n_heads=4, n_layers=2, p_drop=0.1),
    "small": dict(d_model=256, d_ff=1024, n_heads=4, n_layers=3, p_drop=0.1),
    "base": dict(d_model=512, d_ff=2048, n_heads=8, n_layers=6, p_drop=0.1),
    "big": dict(d_model=1024, d_ff=4096, n_heads=16, n_layers=6, p_drop=0.3),
}
