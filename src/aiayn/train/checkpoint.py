"""Checkpoints: weights in safetensors plus the training state, written atomically; averaging (§6.1).

    OUT/checkpoints/step-N/   config.json, model.safetensors, spm.model (an aiayn model directory)
                              state.pt: optimizer, step, RNG states, data position, elapsed time

A checkpoint is written into a temporary directory and renamed into place, so a kill at any
moment leaves either the whole checkpoint or none. The last K are kept.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from ..io import WEIGHTS, save_model
from ..model import Transformer

STATE = "state.pt"


def rng_state() -> dict[str, Any]:
    """The RNG states of torch (CPU and CUDA), Python and NumPy."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_steps(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints in directory, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        if path.name.startswith("step-") and path.name[5:].isdigit() and (path / STATE).is_file():
            found.append((int(path.name[5:]), path))
    return sorted(found)


def latest_checkpoint(directory: Path) -> Path | None:
    steps = checkpoint_steps(directory)
    return steps[-1][1] if steps else None


def save_checkpoint(
    directory: Path, step: int, model: Transformer, vocab_proto: bytes | None, state: dict[str, Any], keep: int
) -> Path:
    """Write checkpoints/step-N atomically (temporary directory, then rename); keep the last `keep`."""
    directory.mkdir(parents=True, exist_ok=True)
    final, tmp = directory / f"step-{step}", directory / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tmp, vocab_proto)
    with open(tmp / STATE, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for _, old in checkpoint_steps(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(checkpoint: Path) -> dict[str, Any]:
    """The training state saved beside a checkpoint's weights."""
    return torch.load(checkpoint / STATE, weights_only=False)  # our own file: RNG tuples, optimizer state


def average_weights(directories: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the weights in several model directories (§6.1), accumulated in float64."""
    if not directories:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for directory in directories:
        weights = load_file(str(Path(directory) / WEIGHTS))
        if total and weights.keys() != total.keys():
            raise ValueError(f"{directory}: its weights do not match those of {directories[0]}")
        for name, tensor in weights.items():
            total[name] = total.get(name, 0) + tensor.double()
    dtypes = load_file(str(Path(directories[0]) / WEIGHTS))
    return {name: (t / len(directories)).to(dtypes[name].dtype) for name, t in total.items()}


def average_checkpoints(directories: list[Path], out: Path) -> Path:
    """Write the mean of the checkpoints' weights as a model directory (config and vocabulary of the last)."""
    from safetensors.torch import save_file

    averaged = average_weights(directories)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (WEIGHTS + ".tmp")
    save_file(averaged, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / WEIGHTS)
    for name in ("config.json", "spm.model"):
        source = Path(directories[-1]) / name
        if source.is_file() and source.resolve() != (out / name).resolve():
            shutil.copyfile(source, out / name)
    return out
