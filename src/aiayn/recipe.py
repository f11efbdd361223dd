"""Training recipes as data: a YAML file with `data`, `model` and `train` sections (§5).

Load order: the model preset, then the YAML file, then `--section.field=value` overrides, each
checked against the field's type. The resolved recipe is written beside the run as recipe.yaml.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import ModelConfig


@dataclass
class DataConfig:
    """Where the parallel text is and how it becomes subword ids (§5.1)."""

    train: str = ""  # file prefix: {train}.{src_lang}[.gz] and {train}.{tgt_lang}[.gz]
    valid: str = ""
    test: str = ""  # decoded and scored at the end of training; "" = none
    src_lang: str = "en"
    tgt_lang: str = "de"
    vocab_size: int = field(default=8000, metadata={"help": "shared BPE vocabulary (§5.1: ~37,000 En-De)"})
    max_subwords: int = field(default=256, metadata={"help": "longer pairs are filtered (and reported)"})
    vocab_sample: int = 2_000_000  # sentences SentencePiece trains on
    vocab: str = field(default="", metadata={"help": "an existing SentencePiece model to use; \"\" = train one in OUT"})


@dataclass
class TrainConfig:
    """The training recipe of §5, with the paper's names."""

    batch_tokens: int = field(default=4096, metadata={"help": "real (non-padding) tokens per side per micro-batch per rank (§5.1)"})
    effective_batch_tokens: int = field(default=0, metadata={"help": "tokens per side per optimizer step; 0 = batch_tokens x world"})
    warmup_steps: int = 4000  # eq. (3)
    lr_factor: float = 1.0  # scale of eq. (3)
    beta1: float = 0.9  # Adam (§5.3)
    beta2: float = 0.98
    adam_eps: float = 1e-9
    label_smoothing: float = 0.1  # epsilon_ls (§5.4)
    clip_norm: float = 0.0  # gradient clipping; 0 = off (the paper does not clip)
    bf16: bool = False  # bf16 autocast (CPU and CUDA)
    fp16: bool = False  # fp16 autocast with a gradient scaler (older GPUs without bf16)
    compile: bool = False  # torch.compile the model (the first steps pay for the compilation)
    max_steps: int = 100_000  # the paper's base model: 100,000 steps
    max_minutes: float = 0.0  # stop after this much training time; 0 = no limit
    max_epochs: int = 0  # 0 = no limit
    seed: int = 1
    threads: int = 0  # torch CPU threads; 0 = torch's default
    log_every: int = 20  # steps between TensorBoard points
    eval_every: int = 500  # steps between validation loss/perplexity; 0 = only at the end
    eval_bleu: bool = True  # validation BLEU with each evaluation
    bleu_sentences: int = 500  # validation sentences decoded for BLEU; 0 = all
    save_every: int = 1000  # steps between checkpoints
    keep_checkpoints: int = 5  # the last K are kept
    average_last: int = 5  # checkpoints averaged into OUT/model at the end (§6.1: 5 base, 20 big)
    beam_size: int = 4  # decoding for BLEU (§6.1)
    alpha: float = 0.6
    device: str = "auto"  # auto = cuda when available, else cpu


@dataclass
class Recipe:
    data: DataConfig = field(default_factory=DataConfig)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "small"})  # preset + ModelConfig fields
    train: TrainConfig = field(default_factory=TrainConfig)

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The ModelConfig named by the model section, with the vocabulary's size and the data's languages."""
        fields = {"src_lang": self.data.src_lang, "tgt_lang": self.data.tgt_lang, **self.model}
        preset = fields.pop("preset", None)
        fields["vocab_size"] = vocab_size
        return ModelConfig.preset(preset, **fields) if preset else ModelConfig.from_dict(fields)

    def to_dict(self) -> dict[str, Any]:
        return {"data": dataclasses.asdict(self.data), "model": dict(self.model), "train": dataclasses.asdict(self.train)}

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


SECTIONS = {"data": DataConfig, "train": TrainConfig}


def _convert(value: Any, hint: Any, where: str) -> Any:
    """value as the type named by hint (str, int, float, bool, X | None, Literal), or a ValueError."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        for arg in args:
            if arg is not type(None):
                return _convert(value, arg, where)
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise ValueError(f"{where}: {value!r} is not one of {typing.get_args(hint)}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError(f"{where}: expected true or false, got {value!r}")
    if hint in (int, float, str):
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        try:
            if hint is int and isinstance(value, str):
                number = float(value)  # "4e3" is an integer too
                if not number.is_integer():
                    raise ValueError
                return int(number)
            return hint(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected {hint.__name__}, got {value!r}") from None
    return value


def _set(recipe: Recipe, section: str, name: str, value: Any, where: str) -> None:
    """Set recipe.section.name = value after checking the name and converting to the field's type."""
    if section == "model":
        hints = typing.get_type_hints(ModelConfig)
        if name == "preset":
            recipe.model["preset"] = _convert(value, str | None, where)
            return
        if name not in hints:
            raise ValueError(f"{where}: ModelConfig has no field {name!r}")
        recipe.model[name] = _convert(value, hints[name], where)
        return
    if section not in SECTIONS:
        raise ValueError(f"{where}: unknown section {section!r}; sections are data, model, train")
    hints = typing.get_type_hints(SECTIONS[section])
    if name not in hints:
        raise ValueError(f"{where}: {section} has no field {name!r}; fields: {', '.join(hints)}")
    setattr(getattr(recipe, section), name, _convert(value, hints[name], where))


def load_recipe(path: str | Path | None, overrides: list[str] = ()) -> Recipe:
    """The recipe in the YAML file (None = defaults), then `section.field=value` overrides."""
    recipe = Recipe()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such recipe")
        values = yaml.safe_load(path.read_text()) or {}
        if not isinstance(values, dict):
            raise ValueError(f"{path}: a recipe is a mapping with data, model and train sections")
        for section, fields in values.items():
            if not isinstance(fields, dict):
                raise ValueError(f"{path}: section {section!r} must be a mapping")
            if section == "model":
                recipe.model = {}
            for name, value in fields.items():
                _set(recipe, section, name, value, f"{path}: {section}.{name}")
    for item in overrides:
        key, sep, value = item.removeprefix("--").partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot:
            raise ValueError(f"override {item!r}: expected --section.field=value")
        _set(recipe, section, name, yaml.safe_load(value) if value else value, f"override {item!r}")
    return recipe
