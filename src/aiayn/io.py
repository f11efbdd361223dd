"""Model directories: what `Translator.load` reads and training exports.

    DIR/config.json        {"format": "aiayn", "version": ..., "model": ModelConfig fields}
    DIR/model.safetensors  the weights (no pickled code is ever loaded)
    DIR/spm.model          the shared SentencePiece vocabulary, when there is one
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_model as _load_weights
from safetensors.torch import save_model as _save_weights

from . import __version__
from .config import ModelConfig
from .model import Transformer

CONFIG, WEIGHTS, VOCAB = "config.json", "model.safetensors", "spm.model"


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside path, then rename: a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_model(model: Transformer, directory: str | Path, vocab_proto: bytes | None = None, **extra) -> Path:
    """Write config.json, model.safetensors and (given) spm.model into directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    model = getattr(model, "_orig_mod", model)  # and torch.compile
    tmp = directory / (WEIGHTS + ".tmp")
    _save_weights(model, str(tmp))
    os.replace(tmp, directory / WEIGHTS)
    meta = {"format": "aiayn", "version": __version__, "model": model.config.to_dict(), **extra}
    write_atomic(directory / CONFIG, json.dumps(meta, indent=2).encode())
    if vocab_proto is not None:
        write_atomic(directory / VOCAB, vocab_proto)
    return directory


def read_config(directory: str | Path) -> dict:
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: no {CONFIG}; not a model directory")
    return json.loads(path.read_text())


def is_aiayn_model(directory: str | Path) -> bool:
    try:
        return read_config(directory).get("format") == "aiayn"
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def load_model(directory: str | Path, device: str | torch.device = "cpu") -> Transformer:
    """The Transformer saved in directory, in eval mode."""
    directory = Path(directory)
    meta = read_config(directory)
    if meta.get("format") != "aiayn":
        raise ValueError(f"{directory / CONFIG}: not an aiayn model (format {meta.get('format')!r})")
    model = Transformer(ModelConfig.from_dict(meta["model"]))
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{directory}: no {WEIGHTS}")
    _load_weights(model, str(weights), device=str(device))
    return model.to(device).eval()
