"""Rank and world size, read from torchrun's environment; one process needs no torch.distributed.

Every rank reads the same batch stream; a step takes accumulation x world size batches and rank r
trains on batches r, r + world size, ...; only rank 0 logs, evaluates and writes files. Under
torchrun, `init` joins the process group (NCCL on GPUs, Gloo on CPUs) and `wrap` puts the model in
PyTorch's DistributedDataParallel: nothing home-made.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# How long the other ranks wait while rank 0 trains the vocabulary and prepares the token store (`wait_for_rank_0`),
# which takes hours on WMT's 36M pairs; Gloo's default timeout is 30 minutes and NCCL's 10, and the training's own
# collectives keep those, so that a rank that hangs is still found in minutes.
PREPARATION_WAIT = datetime.timedelta(hours=12)
_preparation_group = None


def init(device: torch.device) -> tuple[torch.device, bool]:
    """Join torchrun's process group when WORLD_SIZE > 1; return (this rank's device, whether we joined).

    On CUDA each rank takes GPU LOCAL_RANK and the backend is NCCL; on CPU it is Gloo. torchrun's
    environment (MASTER_ADDR/PORT, RANK, WORLD_SIZE) tells init_process_group where the others are.
    """
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if int(os.environ.get("WORLD_SIZE", 1)) == 1 or dist.is_initialized():
        return device, False
    cuda = device.type == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    return device, True


def close(joined: bool) -> None:
    """Leave the process group that `init` joined."""
    if joined and dist.is_initialized():
        dist.barrier()  # no rank tears its connections down while another still has work on them
        dist.destroy_process_group()


def exit_rank(code: int) -> None:
    """End a torchrun rank now, skipping the interpreter's teardown; every file must be closed already.

    Once DDP has wrapped a model, PyTorch keeps the Gloo group alive after destroy_process_group (its
    threads stay up; measured with torch 2.13), and freeing it while the interpreter shuts down aborts
    the process ("terminate called without an active exception", SIGABRT): rank 1 of the two-rank CI
    test died so, after training had finished and written everything, in about one run in three.
    """
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """The model in DistributedDataParallel when there are several ranks, else the model itself.

    DDP averages the gradients over ranks during the backward pass, in buckets that overlap with
    it. Keep the unwrapped module for saving and evaluation: its state dict has no `module.` prefix.
    """
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return model
    return DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
    )


def no_sync(model: nn.Module, accumulate_only: bool) -> contextlib.AbstractContextManager:
    """DDP's no_sync on a micro-batch that only accumulates: its all-reduce waits for the last one."""
    if accumulate_only and isinstance(model, DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when flag is true on any (a time limit must stop all ranks at the same step)."""
    return all_reduce_sum(float(flag), device) > 0


def rank() -> int:
    """This process's rank: 0 without torchrun."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    """The number of processes: 1 without torchrun."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    """Rank 0 logs, evaluates and writes checkpoints."""
    return rank() == 0


def all_reduce_sum(value: float, device: torch.device) -> float:
    """The sum of value over all ranks (value itself in a single process)."""
    if world_size() == 1 or not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def wait_for_rank_0() -> None:
    """A barrier that waits as long as rank 0's preparation takes (up to PREPARATION_WAIT): on a Gloo group of its
    own, which waits on the CPU without spinning and leaves the default group's timeout as it is."""
    global _preparation_group
    if not (dist.is_available() and dist.is_initialized()):
        return
    if _preparation_group is None:  # every rank reaches the first wait, so every rank makes the group
        _preparation_group = dist.new_group(backend="gloo", timeout=PREPARATION_WAIT)
    dist.barrier(group=_preparation_group)
