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
from typing import Any, Literal

import yaml

from .config import ModelConfig, check_fields
from .data.sources import check_spec
from .data.vocab import UNK_ID


@dataclass
class DataConfig:
    """Where the parallel text is and how it becomes subword ids (§5.1)."""

    format: Literal["text", "ptb"] = "text"  # ptb: trees from a treebank archive (aiayn.parse.data, §6.3)
    archive: str = ""  # format ptb: the zip (or folder) of .mrg files
    # Each split: a file prefix ({train}.{src_lang}[.gz] and {train}.{tgt_lang}[.gz]), a .tsv or .jsonl file, or a
    # Hugging Face dataset {dataset: NAME or FOLDER, config: ..., split: ...} (aiayn.data.sources); ptb: wsj_0001-0159
    train: str | dict = ""
    valid: str | dict = ""
    test: str | dict = ""  # decoded and scored at the end of training; "" = none
    src_lang: str = "en"
    tgt_lang: str = "de"
    vocab_size: int = field(default=8000, metadata={"help": "shared BPE vocabulary (§5.1: ~37,000 En-De)"})
    max_subwords: int = field(default=256, metadata={"help": "longer pairs are filtered (and reported)"})
    vocab_sample: int = 2_000_000  # sentences SentencePiece trains on, drawn from the streamed text
    workers: int = field(default=0, metadata={"help": "processes that encode the text (0 = one per core)"})
    vocab: str = field(default="", metadata={"help": 'an existing SentencePiece model to use; "" = train one in OUT'})
    source_units: Literal["subwords", "words"] = "subwords"  # ptb only: the sentence as BPE pieces or whole words
    # ptb only, §6.3's semi-supervised setting: trees parsed automatically (one a line, aiayn.parse.silver) added to
    # the training trees, the first silver_trees of them (0: all), the gold trees repeated gold_copies times
    silver: str = ""
    silver_trees: int = 0
    gold_copies: int = 1
    bpe_dropout: float = field(
        default=0.0,
        metadata={
            "help": "each training epoch segmented anew, each merge skipped "
            "with this probability (not in the paper; data/bpe_dropout.py)"
        },
    )


@dataclass
class TrainConfig:
    """The training recipe of §5, with the paper's names."""

    batch_tokens: int = field(
        default=4096, metadata={"help": "real (non-padding) tokens per side per micro-batch per rank (§5.1)"}
    )
    effective_batch_tokens: int = field(
        default=0, metadata={"help": "tokens per side per optimizer step; 0 = batch_tokens x world"}
    )
    warmup_steps: int = 4000  # eq. (3)
    lr_factor: float = 1.0  # scale of eq. (3)
    cooldown: float = field(
        default=0.0,
        metadata={
            "help": "last share of the run's steps over which the rate falls "
            "linearly to 0 (not in the paper; train/schedule.py)"
        },
    )
    beta1: float = 0.9  # Adam (§5.3)
    beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = field(
        default=0.0,
        metadata={
            "help": "decoupled weight decay on the weight matrices (AdamW; "
            "not in the paper, whose Adam has none); 0 = off"
        },
    )
    label_smoothing: float = 0.1  # epsilon_ls (§5.4)
    clip_norm: float = 0.0  # gradient clipping; 0 = off (the paper does not clip)
    bf16: bool | Literal["auto"] = False  # bf16 autocast; auto = where the hardware multiplies in bf16 (precision.py)
    fp16: bool = False  # fp16 autocast with a gradient scaler (older GPUs without bf16)
    compile: bool = False  # torch.compile the model (the first steps pay for the compilation)
    attention: Literal["auto", "fused", "math"] = (
        "auto"  # eq. (1)'s kernel; auto = math on a CPU (cpu/train_attention.py)
    )
    gemm: Literal["auto", "mkl", "onednn"] = (
        "auto"  # fp32 CPU products; auto = oneDNN where measured faster (cpu/train_gemm.py)
    )
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
    keep_checkpoints: int = 5  # the last K are kept; 0 = all
    average_last: int = 5  # checkpoints averaged into OUT/model at the end (§6.1: 5 base, 20 big)
    average_share: float = 0.0  # and more, up to keep_checkpoints, to span this share of the run's steps; 0 = off
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
        return {
            "data": dataclasses.asdict(self.data),
            "model": dict(self.model),
            "train": dataclasses.asdict(self.train),
        }

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


SECTIONS = {"data": DataConfig, "train": TrainConfig}
# The allowed range of each number (see aiayn.config.check_fields), checked once the recipe is read.
RANGES = {
    "vocab_size": (UNK_ID + 2, None),
    "max_subwords": (1, None),
    "vocab_sample": (1, None),
    "workers": (0, None),
    "bpe_dropout": (0, 1),
    "silver_trees": (0, None),
    "gold_copies": (1, None),
    "batch_tokens": (1, None),
    "effective_batch_tokens": (0, None),
    "warmup_steps": (1, None),
    "lr_factor": (0, None),
    "cooldown": (0, 1),
    "beta1": (0, 1),
    "beta2": (0, 1),
    "adam_eps": (0, None),
    "weight_decay": (0, None),
    "label_smoothing": (0, 1),
    "clip_norm": (0, None),
    "max_steps": (1, None),
    "max_minutes": (0, None),
    "max_epochs": (0, None),
    "seed": (0, None),
    "threads": (0, None),
    "log_every": (1, None),
    "eval_every": (0, None),
    "bleu_sentences": (0, None),
    "save_every": (0, None),
    "keep_checkpoints": (0, None),
    "average_last": (1, None),
    "average_share": (0, 1),
    "beam_size": (1, None),
}


def _convert(value: Any, hint: Any, where: str) -> Any:
    """value as the type named by hint (str, int, float, bool, X | None, Literal), or a ValueError."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:  # the first type that takes the value: bool | Literal["auto"] takes true and "auto"
            if arg is not type(None):
                try:
                    return _convert(value, arg, where)
                except ValueError as err:
                    errors.append(err)
        if len(errors) == 1:
            raise errors[0]
        names = " or ".join(
            "true or false"
            if a is bool
            else "one of " + ", ".join(map(repr, typing.get_args(a)))
            if typing.get_origin(a) is typing.Literal
            else getattr(a, "__name__", str(a))
            for a in args
            if a is not type(None)
        )
        raise ValueError(f"{where}: expected {names}, got {_short(value)}")
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
    if hint is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {_short(value)}")
        return value
    if hint in (int, float, str):
        if isinstance(value, (bool, list, dict)) or value is None:  # str([1]) or int(True) would pass silently
            raise ValueError(f"{where}: expected {hint.__name__}, got {_short(value)}")
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        try:
            if hint is int and isinstance(value, str):
                number = float(value)  # "4e3" is an integer too
                if not number.is_integer():
                    raise ValueError
                return int(number)
            return hint(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{where}: expected {hint.__name__}, got {_short(value)}") from None
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
        if path.is_dir():
            raise IsADirectoryError(f"{path}: a folder, not a recipe file (recipes/*.yaml)")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such recipe")
        values = read_yaml(path) or {}  # empty: all defaults, and the overrides
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
        _set(recipe, section, name, _override_value(value, item), f"override {item!r}")
    check_recipe(recipe, f"{path}: " if path is not None else "")
    return recipe


def check_recipe(recipe: Recipe, where: str = "") -> None:
    """Every number in range, and a model section that makes a ModelConfig: a ValueError naming the field."""
    for section in SECTIONS:
        try:
            check_fields(getattr(recipe, section), RANGES)
        except ValueError as err:
            raise ValueError(f"{where}{section}.{err}") from None
    try:
        model = recipe.model_config(recipe.data.vocab_size)
    except ValueError as err:
        raise ValueError(f"{where}model: {err}") from None
    if recipe.data.max_subwords > model.max_len:  # a kept pair must fit the position table
        raise ValueError(
            f"{where}data.max_subwords {recipe.data.max_subwords} is more than model.max_len {model.max_len}"
        )
    for name in ("train", "valid", "test"):
        if isinstance(spec := getattr(recipe.data, name), dict):
            if recipe.data.format == "ptb":
                raise ValueError(f"{where}data.{name}: format ptb names a range of .mrg files (wsj_0001-0159)")
            check_spec(spec, f"{where}data.{name}")
    if recipe.data.source_units == "words" and recipe.data.format != "ptb":
        raise ValueError(f"{where}data.source_units: words is for parsing (format: ptb); translation uses subwords")
    if (recipe.data.silver or recipe.data.gold_copies != 1) and recipe.data.format != "ptb":
        raise ValueError(f"{where}data.silver and data.gold_copies are for parsing (format: ptb)")
    if recipe.data.bpe_dropout and recipe.data.format == "ptb":
        raise ValueError(f"{where}data.bpe_dropout is for translation's BPE vocabulary; parsing (format: ptb) has none")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader (no tags that build objects), refusing a mapping that gives one key twice: YAML keeps the
    last silently, so `lr_factor: 2` ... `lr_factor: 0.5` would train with 0.5 and say nothing."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:  # the mapping's own keys: a merged one (`<<: *base`) may be overridden
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merge keys, and keys that are lists or mappings (SafeLoader refuses those itself)
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's data; a syntax error names the file, line and column, not `<unicode string>`."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid UTF-8 (byte {err.start})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # safe_load's loader, which also refuses a key given twice
    except yaml.MarkedYAMLError as err:
        mark, context = err.problem_mark, err.context
        since = f" ({context}, from line {err.context_mark.line + 1})" if context and err.context_mark else ""
        raise ValueError(f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {err.problem}{since}") from None
    except yaml.reader.ReaderError as err:
        line = text[: err.position].count("\n") + 1
        raise ValueError(f"{path}:{line}: not valid YAML: character {err.character!r} is not allowed") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a recipe (nested too deeply)") from None


def _override_value(value: str, item: str) -> Any:
    """The YAML value of one --section.field=value override ("" stays "")."""
    try:
        return yaml.safe_load(value) if value else value
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"override {item!r}: not a valid YAML value ({problem})") from None
