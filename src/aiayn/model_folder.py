"""The kinds of model folder aiayn reads, each detected once and handed to its reader.

    aiayn    config.json {"format": "aiayn"}, model.safetensors, and its tokenizer: spm.model, or (converted
             from Marian) source.spm, target.spm, vocab.json, tokenizer_config.json
    parser   an aiayn folder whose tokenizer is a parser's (parse-target.json beside the weights, §6.3)
    marian   Hugging Face Marian: config.json {"model_type": "marian"}, weights, the same four tokenizer files

`load_any` returns the model, its tokenizer and its decoding defaults; `model_config` reads config.json alone
(a reader that lays the weights out for decoding is chosen from it before the weights are read); the tokenizer's
files are written and read back here too.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import weights
from .config import DecodeConfig, ModelConfig
from .data.vocab import Vocab
from .marian.export import marian_tokenizer_files
from .marian.load import is_marian_model, load_marian, model_config_from_marian, read_marian_config
from .marian.tokenizer import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB, VOCAB, MarianTokenizer
from .model import Transformer
from .parse.tokenizer import SOURCE_FILE, TARGET_FILE, WORDS_FILE, ParseTokenizer


def is_parser(directory: str | Path) -> bool:
    """Whether directory holds a parsing model's tokenizer (its outputs are tree symbols, not text)."""
    return ParseTokenizer.is_saved_in(directory)


def detect_format(directory: str | Path) -> str:
    """ "aiayn" or "marian", from config.json; an error naming the directory otherwise."""
    directory = Path(directory)
    if weights.is_aiayn_model(directory):
        return "aiayn"
    if is_marian_model(directory):
        return "marian"
    weights.read_config(directory)  # a missing config.json gets its own message
    raise ValueError(f"{directory / weights.CONFIG}: neither an aiayn model nor a Hugging Face Marian model")


def load_tokenizer(directory: str | Path) -> Vocab | MarianTokenizer | ParseTokenizer:
    """The tokenizer stored beside a model: spm.model (aiayn's own), else Marian's vocab.json and spm files."""
    directory = Path(directory)
    if ParseTokenizer.is_saved_in(directory):  # a parser: subword source, tree-symbol target
        return ParseTokenizer.load(directory)
    if (directory / weights.VOCAB).is_file():
        return Vocab.load(directory / weights.VOCAB)
    if (directory / VOCAB).is_file() or (directory / SOURCE_SPM).is_file():
        return MarianTokenizer.load(directory)
    raise FileNotFoundError(f"{directory}: no tokenizer ({weights.VOCAB}, or {SOURCE_SPM}/{TARGET_SPM}/{VOCAB})")


def tokenizer_files(tokenizer: Vocab | MarianTokenizer | ParseTokenizer) -> dict[str, bytes]:
    """The files `save_tokenizer` writes for tokenizer: name -> contents."""
    if isinstance(tokenizer, ParseTokenizer):
        return tokenizer.files()
    return {weights.VOCAB: tokenizer.proto} if isinstance(tokenizer, Vocab) else marian_tokenizer_files(tokenizer)


# Every kind's tokenizer files, a parser's first: `load_tokenizer` reads a parser's before spm.model, and spm.model
# before Marian's.
TOKENIZER_FILES = (TARGET_FILE, WORDS_FILE, SOURCE_FILE, weights.VOCAB, VOCAB, TARGET_VOCAB, SOURCE_SPM, TARGET_SPM)


def save_tokenizer(tokenizer: Vocab | MarianTokenizer | ParseTokenizer, directory: str | Path) -> None:
    """Write a tokenizer beside a model so that `load_tokenizer` reads it back: spm.model, Marian's files, or a
    parser's. Another tokenizer's files there are removed first, since `load_tokenizer` could read them in place of
    these (the commands that write into a folder the user named replace them only with --force)."""
    directory = Path(directory)
    files = tokenizer_files(tokenizer)
    for name in TOKENIZER_FILES:
        if name not in files:
            (directory / name).unlink(missing_ok=True)
    for name, data in files.items():
        weights.write_atomic(directory / name, data)


def model_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of an aiayn or Marian directory, from its config.json alone (no weights read)."""
    if detect_format(directory) == "marian":
        return model_config_from_marian(read_marian_config(directory), unk_id=1)  # sizes only: any id will do
    return weights.read_model_config(directory)


def load_any(
    directory: str | Path, device: str | torch.device = "cpu", read: weights.Reader = weights.read_safetensors
) -> tuple[Transformer, Vocab | MarianTokenizer, DecodeConfig | None]:
    """An aiayn or Marian directory as (model, tokenizer, decode config or None for aiayn's defaults);
    `read` reads the weights (aiayn.weights.read_column_major for decoding on a CPU, MappedReads().read)."""
    if detect_format(directory) == "marian":
        return load_marian(directory, device, read)
    meta = weights.read_config(directory)
    try:
        decode = DecodeConfig.from_dict(meta["decode"]) if "decode" in meta else None
    except ValueError as err:
        raise ValueError(f"{Path(directory) / weights.CONFIG}: decode: {err}") from None
    return weights.load_model(directory, device, read), load_tokenizer(directory), decode
