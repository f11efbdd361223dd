"""The random number generators a run uses (dropout: torch; data order: its own seeded generator).

Every rank's states are saved at each checkpoint and each rank gets its own back on resume, so a
resumed run draws the same dropout masks as one left alone (§5.4), on any number of ranks.
In a checkpoint they are plain JSON numbers (Python, NumPy) and byte tensors (torch, CUDA).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def rng_state() -> dict[str, Any]:
    """This process's RNG states: torch (CPU and every CUDA device), Python and NumPy."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def all_rng_states() -> list[dict[str, Any]]:
    """Every rank's rng_state(), in rank order (all ranks must call this together)."""
    mine = rng_state()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [mine]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, mine)  # between the job's own processes; nothing read from disk
    return states


def rng_to_plain(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON-able numbers and lists, byte tensors) for one rank's rng_state()."""
    version, internal, gauss = state["python"]
    kind, keys, pos, has_gauss, cached = state["numpy"]
    plain = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }
    tensors = {"torch": state["torch"]}
    tensors.update({f"cuda.{i}": t for i, t in enumerate(state.get("cuda", []))})
    return plain, tensors


def rng_from_plain(plain: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The inverse of rng_to_plain."""
    version, internal, gauss = plain["python"]
    kind, keys, pos, has_gauss, cached = plain["numpy"]
    state = {
        "torch": tensors["torch"],
        "python": (version, tuple(internal), gauss),
        "numpy": (kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached),
    }
    cuda = sorted((int(k.split(".")[1]), t) for k, t in tensors.items() if k.startswith("cuda."))
    if cuda:
        state["cuda"] = [t for _, t in cuda]
    return state


def rng_from_old(old: dict[str, Any]) -> dict[str, Any]:
    """One rank's states from the state.pt of an older aiayn."""
    version, internal, gauss = old["python"]
    kind, keys, pos, has_gauss, cached = old["numpy"]
    state = {
        "torch": old["torch"],
        "python": (version, tuple(internal), gauss),
        "numpy": (kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached),
    }
    if "cuda" in old:
        state["cuda"] = list(old["cuda"])
    return state
