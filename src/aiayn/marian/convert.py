"""Conversions between model directories: Marian -> aiayn, aiayn -> Marian, either -> CTranslate2.

aiayn      config.json {"format": "aiayn"}, model.safetensors, and its tokenizer: spm.model, or
           (converted from Marian) source.spm, target.spm, vocab.json, tokenizer_config.json
marian     Hugging Face Marian: config.json {"model_type": "marian"}, weights, the same four files
ctranslate2  what ctranslate2's own TransformersConverter writes, plus the SentencePiece models
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import torch

from .. import io
from ..config import DecodeConfig, ModelConfig
from ..data.vocab import Vocab
from ..model import Transformer
from ..parse.tokenizer import SOURCE_FILE, TARGET_FILE, WORDS_FILE, ParseTokenizer
from .export import marian_tokenizer_files, save_marian
from .load import is_marian_model, load_marian, model_config_from_marian, read_marian_config
from .tokenizer import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB, VOCAB, MarianTokenizer

FORMATS = ("aiayn", "marian", "ctranslate2")
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def detect_format(directory: str | Path) -> str:
    """ "aiayn" or "marian", from config.json; an error naming the directory otherwise."""
    directory = Path(directory)
    if io.is_aiayn_model(directory):
        return "aiayn"
    if is_marian_model(directory):
        return "marian"
    io.read_config(directory)  # a missing config.json gets its own message
    raise ValueError(f"{directory / io.CONFIG}: neither an aiayn model nor a Hugging Face Marian model")


def load_tokenizer(directory: str | Path) -> Vocab | MarianTokenizer | ParseTokenizer:
    """The tokenizer stored beside a model: spm.model (aiayn's own), else Marian's vocab.json and spm files."""
    directory = Path(directory)
    if ParseTokenizer.is_saved_in(directory):  # a parser: subword source, tree-symbol target
        return ParseTokenizer.load(directory)
    if (directory / io.VOCAB).is_file():
        return Vocab.load(directory / io.VOCAB)
    if (directory / VOCAB).is_file() or (directory / SOURCE_SPM).is_file():
        return MarianTokenizer.load(directory)
    raise FileNotFoundError(f"{directory}: no tokenizer ({io.VOCAB}, or {SOURCE_SPM}/{TARGET_SPM}/{VOCAB})")


def tokenizer_files(tokenizer: Vocab | MarianTokenizer | ParseTokenizer) -> dict[str, bytes]:
    """The files `save_tokenizer` writes for tokenizer: name -> contents."""
    if isinstance(tokenizer, ParseTokenizer):
        return tokenizer.files()
    return {io.VOCAB: tokenizer.proto} if isinstance(tokenizer, Vocab) else marian_tokenizer_files(tokenizer)


# Every kind's tokenizer files, a parser's first: `load_tokenizer` reads a parser's before spm.model, and spm.model
# before Marian's.
TOKENIZER_FILES = (TARGET_FILE, WORDS_FILE, SOURCE_FILE, io.VOCAB, VOCAB, TARGET_VOCAB, SOURCE_SPM, TARGET_SPM)


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
        io.write_atomic(directory / name, data)


def model_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of an aiayn or Marian directory, from its config.json alone (no weights read)."""
    if detect_format(directory) == "marian":
        return model_config_from_marian(read_marian_config(directory), unk_id=1)  # sizes only: any id will do
    return io.read_model_config(directory)


def load_any(
    directory: str | Path, device: str | torch.device = "cpu", read: io.Reader = io.read_safetensors
) -> tuple[Transformer, Vocab | MarianTokenizer, DecodeConfig | None]:
    """An aiayn or Marian directory as (model, tokenizer, decode config or None for aiayn's defaults);
    `read` reads the weights (aiayn.io.read_column_major for decoding on a CPU, MappedReads().read)."""
    if detect_format(directory) == "marian":
        return load_marian(directory, device, read)
    meta = io.read_config(directory)
    try:
        decode = DecodeConfig.from_dict(meta["decode"]) if "decode" in meta else None
    except ValueError as err:
        raise ValueError(f"{Path(directory) / io.CONFIG}: decode: {err}") from None
    return io.load_model(directory, device, read), load_tokenizer(directory), decode


def marian_to_aiayn(marian_dir: str | Path, out_dir: str | Path) -> Path:
    """An aiayn model directory from a Marian one: same weights, Marian's tokenizer files, its decoding defaults."""
    model, tokenizer, decode = load_marian(marian_dir)
    out = io.save_model(model, out_dir, None, decode=dataclasses.asdict(decode), converted_from="marian")
    save_tokenizer(tokenizer, out)
    return out


def aiayn_to_marian(aiayn_dir: str | Path, out_dir: str | Path) -> Path:
    """A Hugging Face Marian directory from an aiayn model directory (see export.save_marian)."""
    model, tokenizer, decode = load_any(aiayn_dir)
    decode = decode or DecodeConfig()
    return save_marian(model, tokenizer, out_dir, beam_size=decode.beam_size, alpha=decode.alpha)


def to_ctranslate2(
    model_dir: str | Path, out_dir: str | Path, quantization: str | None = None, force: bool = False
) -> Path:
    """A CTranslate2 model through ctranslate2's TransformersConverter (an aiayn model goes via Marian)."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose from {', '.join(QUANTIZATIONS)}")
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise ValueError(f"{out_dir} exists; pass --force to replace its model files")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # ctranslate2's converter deletes its whole output directory: let it write a fresh one beside
    # out_dir, then move its files in, so that --force replaces only the files the converter writes.
    with tempfile.TemporaryDirectory(prefix=".aiayn-ct2-", dir=out_dir.parent) as tmp:
        converted = Path(tmp) / "ct2"
        if detect_format(model_dir) == "marian":
            _run_ctranslate2(Path(model_dir), converted, quantization)
        else:
            _run_ctranslate2(aiayn_to_marian(model_dir, Path(tmp) / "marian"), converted, quantization)
        out_dir.mkdir(exist_ok=True)
        for path in converted.iterdir():
            os.replace(path, out_dir / path.name)
    return out_dir


def _run_ctranslate2(marian_dir: Path, out_dir: Path, quantization: str | None) -> Path:
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        raise ValueError("exporting to CTranslate2 needs the ctranslate2 and transformers packages") from None

    model, tokenizer, _ = load_marian(marian_dir)
    config = model.config
    if config.pad_id != config.vocab_size - 1:
        raise ValueError(f"{marian_dir}: <pad> is id {config.pad_id}, not the last; CTranslate2 drops the last row")
    start_row = model.decoder.embed.weight[config.bos_id]
    start_piece = tokenizer.id_to_piece[config.bos_id]

    class Converter(TransformersConverter):
        def _load(self):
            spec = super()._load()
            # CTranslate2 starts a Marian decoder from a zero vector, which is <pad>'s row in released
            # models. A model whose start token has a learned row (aiayn's <s>) must start from it.
            if config.bos_id != config.pad_id or start_row.abs().max() > 0:
                spec.decoder.start_from_zero_embedding = False
                spec.config.decoder_start_token = start_piece
            return spec

    files = [SOURCE_SPM, TARGET_SPM]
    Converter(str(marian_dir), copy_files=files).convert(str(out_dir), quantization=quantization, force=True)
    return out_dir
