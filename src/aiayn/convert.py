"""Conversions between model folders: Marian -> aiayn, aiayn -> Marian, either -> CTranslate2.

ctranslate2  what ctranslate2's own TransformersConverter writes, plus the SentencePiece models
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from . import weights
from .config import DecodeConfig
from .marian.export import save_marian
from .marian.load import load_marian
from .marian.tokenizer import SOURCE_SPM, TARGET_SPM
from .model_folder import detect_format, load_any, save_tokenizer

FORMATS = ("aiayn", "marian", "ctranslate2")
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def marian_to_aiayn(marian_dir: str | Path, out_dir: str | Path) -> Path:
    """An aiayn model directory from a Marian one: same weights, Marian's tokenizer files, its decoding defaults."""
    model, tokenizer, decode = load_marian(marian_dir)
    out = weights.save_model(model, out_dir, None, decode=dataclasses.asdict(decode), converted_from="marian")
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
