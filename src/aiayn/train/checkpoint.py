"""Checkpoints: weights and the training state, written whole or not at all, and read without running code.

    OUT/checkpoints/step-N/   config.json, model.safetensors, spm.model (an aiayn model directory)
                              state.json         TrainState: counters, data position, every rank's
                                                 Python/NumPy RNG states, the fp16 loss scale,
                                                 the optimizer's hyper-parameters (plain JSON)
                              state.safetensors  the optimizer's tensors (Adam's moments, §5.3) and
                                                 every rank's torch RNG state (byte tensors)

A checkpoint is written into a temporary directory and renamed into place, so a kill at any
moment leaves either the whole checkpoint or none; a failed write (a full disk) removes the
temporary directory and leaves the earlier checkpoints as they were. The last K are kept. Nothing
is unpickled: a `state.pt` of an older aiayn is read with `torch.load(weights_only=True)`, which
refuses anything but tensors and plain containers.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from .. import faults
from ..data.batching import BatchStream
from ..files import fsync_folder, temporary_beside
from ..model import Transformer
from ..weights import WEIGHTS, load_plain_pickle, save_model, save_tensors, write_atomic
from . import distributed
from .rng import all_rng_states, rng_from_plain, rng_to_plain, set_rng_state

STATE, TENSORS, OLD_STATE = "state.json", "state.safetensors", "state.pt"
FORMAT = "aiayn-train-state"


@dataclass
class TrainState:
    """Everything a run carries from step to step besides weights and optimizer: saved and restored whole."""

    step: int = 0
    elapsed: float = 0.0  # seconds of training (evaluation included), over all resumes
    flops: float = 0.0  # estimated training FLOPs (aiayn.train.flops)
    tokens: int = 0  # source + target tokens trained on, padding excluded
    data: dict[str, int] = field(default_factory=lambda: {"epoch": 1, "index": 0})  # BatchStream position
    rng: list[dict[str, Any]] = field(default_factory=list)  # each rank's RNG states (aiayn.train.rng)
    scaler: dict[str, Any] = field(default_factory=dict)  # fp16's GradScaler state; {} otherwise
    gemm: str = ""  # the products' backend chosen at the run's start (aiayn.cpu.train_gemm); "" = not yet chosen
    planned_steps: int = 0  # the steps a time budget holds, planned once for train.cooldown (schedule.py); 0 = not yet
    planned_minutes: float = 0.0  # the budget (max_minutes) that plan was made for


@dataclass
class Checkpoints:
    """What a run saves at each checkpoint and restores on resume, besides its TrainState."""

    directory: Path  # OUT/checkpoints
    model: Transformer  # the unwrapped model (no DDP, no torch.compile)
    vocab_proto: bytes | None  # written beside the weights as spm.model
    optimizer: torch.optim.Optimizer
    stream: BatchStream  # the data position
    scaler: torch.amp.GradScaler | None  # fp16's loss scale
    keep: int  # the last K are kept; 0 = all
    decode: dict[str, Any] = field(default_factory=dict)  # the recipe's search (beam_size, alpha): the model's defaults

    def latest(self) -> Path | None:
        return latest_checkpoint(self.directory)

    def save(self, state: TrainState, elapsed: float) -> None:
        """Every rank's RNG states to rank 0, which writes checkpoints/step-N with all an exact resume needs."""
        state.elapsed, state.data = elapsed, self.stream.state_dict()
        state.rng = all_rng_states()
        state.scaler = self.scaler.state_dict() if self.scaler is not None else {}  # {} unless fp16
        if distributed.is_main():
            save_checkpoint(
                self.directory, self.model, self.vocab_proto, self.optimizer.state_dict(), state, self.keep, self.decode
            )
        distributed.barrier()

    def resume(self, checkpoint: Path, device: torch.device, seed: int) -> TrainState:
        """Restore weights, optimizer, this rank's RNG states and the data position; return the TrainState."""
        from safetensors.torch import load_model as load_weights

        state, optimizer_state = load_checkpoint(checkpoint)  # first: a refused state leaves the model untouched
        try:
            load_weights(self.model, str(checkpoint / WEIGHTS), device=str(device))
        except SafetensorError as err:  # a truncated or damaged file: checked before any weight is set
            raise ValueError(
                f"{checkpoint / WEIGHTS}: unreadable ({err}); delete this checkpoint to resume from the one before"
            ) from None
        self.optimizer.load_state_dict(optimizer_state)
        self.stream.load_state_dict(state.data)
        rank = distributed.rank()
        set_rng_state(state.rng[min(rank, len(state.rng) - 1)])
        if rank >= len(state.rng):  # more ranks than were saved: a dropout stream of its own for each new one
            torch.manual_seed(seed + rank + 1_000_003 * state.step)
        if self.scaler is not None and state.scaler:
            self.scaler.load_state_dict(state.scaler)
        return state


def checkpoint_steps(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the complete checkpoints in directory, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        if (
            path.name.startswith("step-")
            and path.name[5:].isdigit()
            and ((path / STATE).is_file() or (path / OLD_STATE).is_file())
        ):
            found.append((int(path.name[5:]), path))
    return sorted(found)


def checkpoints_to_average(directory: Path, last: int, save_every: int | None = None, share: float = 0.0) -> list[Path]:
    """The last `last` checkpoints in directory (more where `share` asks: `checkpoints_averaged`), oldest
    first, for the mean of §6.1.

    A run that stops on time or on Ctrl-C saves where it stops, often a few steps after the last
    periodic checkpoint; averaging both would count nearly the same weights twice (which costs BLEU:
    docs/studies/training-quality.md). So a checkpoint less than half a save interval
    before the next one taken is left out. save_every: the run's interval; None infers it as the
    median gap between the checkpoints (two checkpoints alone are always both taken).
    """
    steps = checkpoint_steps(directory)
    if save_every is None:
        gaps = sorted(b - a for (a, _), (b, _) in zip(steps, steps[1:]))
        save_every = gaps[len(gaps) // 2] if len(gaps) > 1 else 0
    if steps:
        last = checkpoints_averaged(last, share, steps[-1][0], save_every)
    taken: list[tuple[int, Path]] = []
    for step, path in reversed(steps):
        if len(taken) == last:
            break
        if not taken or taken[-1][0] - step >= save_every / 2:
            taken.append((step, path))
    return [path for _, path in reversed(taken)]


def checkpoints_averaged(last: int, share: float, steps: int, save_every: int) -> int:
    """How many checkpoints the end of a run averages: `last`, or more where they span less than `share`
    of its `steps` (checkpoints `save_every` apart). Not in the paper: §6.1 averages a fixed 5 (20 big).

    A run that ends while its model still improves fast should average few (older weights lag);
    one whose validation loss went flat long before its end gains from more (docs/studies/training-quality.md).
    """
    return max(last, round(share * steps / save_every)) if share > 0 and save_every > 0 else last


def latest_checkpoint(directory: Path) -> Path | None:
    steps = checkpoint_steps(directory)
    return steps[-1][1] if steps else None


def save_checkpoint(
    directory: Path,
    model: Transformer,
    vocab_proto: bytes | None,
    optimizer_state: dict,
    state: TrainState,
    keep: int,
    decode: dict[str, Any] | None = None,
) -> Path:
    """Write checkpoints/step-N atomically (temporary directory, then rename); keep the last `keep`.

    decode: the search settings written into config.json, which `Translator.load` takes as the
    model's defaults (the averaged model copies the last checkpoint's config.json).
    """
    directory.mkdir(parents=True, exist_ok=True)
    final, tmp = directory / f"step-{state.step}", directory / f".tmp-step-{state.step}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_model(model, tmp, vocab_proto, **({"decode": decode} if decode else {}))
        faults.point("checkpoint.after-model")
        plain, tensors = _split(optimizer_state, state)
        save_tensors(tensors, tmp / TENSORS)
        faults.point("checkpoint.after-state-tensors")
        write_atomic(tmp / STATE, json.dumps(plain).encode(), fault="checkpoint-state")
        fsync_folder(tmp)
        faults.point("checkpoint.before-rename")
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(
            err.errno,
            f"{final}: the checkpoint could not be written ({err.strerror or err}); the earlier checkpoints are kept",
        ) from None
    if final.exists():  # the same step saved again: put the old one aside until the new one is in place
        old = directory / f".old-step-{state.step}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    faults.point("checkpoint.after-rename")
    for _, stale in checkpoint_steps(directory)[:-keep] if keep > 0 else []:
        shutil.rmtree(stale, ignore_errors=True)
        faults.point("checkpoint.after-prune-one")
    return final


def _split(optimizer_state: dict, state: TrainState) -> tuple[dict, dict[str, torch.Tensor]]:
    """(JSON-able dict, flat tensors) of the optimizer state and the TrainState."""
    tensors: dict[str, torch.Tensor] = {}
    per_param: dict[str, dict[str, Any]] = {}
    for index, values in optimizer_state["state"].items():
        per_param[str(index)] = {}
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                per_param[str(index)][name] = value
    rng = []
    for rank, states in enumerate(state.rng):
        plain, rank_tensors = rng_to_plain(states)
        rng.append(plain)
        tensors.update({f"rng.{rank}.{name}": t for name, t in rank_tensors.items()})
    train = {**asdict(state), "rng": rng}
    optimizer = {"param_groups": optimizer_state["param_groups"], "state": per_param}
    return {"format": FORMAT, "version": 1, "train": train, "optimizer": optimizer}, tensors


def load_checkpoint(checkpoint: Path) -> tuple[TrainState, dict]:
    """(TrainState, optimizer state dict) saved beside a checkpoint's weights; no code is run."""
    if not (checkpoint / STATE).is_file():
        return _load_old(checkpoint)
    try:
        plain = json.loads((checkpoint / STATE).read_text())
        tensors = load_file(str(checkpoint / TENSORS))
    except (OSError, ValueError, RuntimeError, SafetensorError) as err:  # safetensors raises its own error type
        raise ValueError(
            f"{checkpoint}: unreadable training state ({err}); delete this checkpoint to resume from the one before"
        ) from None
    if not isinstance(plain, dict) or plain.get("format") != FORMAT:
        raise ValueError(f"{checkpoint / STATE}: not an aiayn training state")
    train = plain["train"]
    rng = [
        rng_from_plain(p, {k.split(".", 2)[2]: t for k, t in tensors.items() if k.startswith(f"rng.{r}.")})
        for r, p in enumerate(train.pop("rng"))
    ]
    per_param: dict[int, dict[str, Any]] = {int(i): dict(v) for i, v in plain["optimizer"]["state"].items()}
    for name, tensor in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            per_param.setdefault(int(index), {})[key] = tensor
    optimizer = {"state": per_param, "param_groups": plain["optimizer"]["param_groups"]}
    return TrainState(**train, rng=rng), optimizer


def _load_old(checkpoint: Path) -> tuple[TrainState, dict]:
    """The state.pt of an older aiayn, read with weights_only=True (a pickle with code is refused)."""
    path = checkpoint / OLD_STATE
    try:
        old = load_plain_pickle(path, "a training state")
    except ValueError as err:
        raise ValueError(f"{err}; delete the checkpoint to resume from an earlier one") from None
    from .rng import rng_from_old

    state = TrainState(
        step=old["step"],
        elapsed=old["elapsed"],
        flops=old["flops"],
        tokens=old["tokens"],
        data=dict(old["data"]),
        rng=[rng_from_old(old["rng"])],
        scaler=old.get("scaler") or {},
    )
    return state, old["optimizer"]


def average_weights(directories: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the weights in several model directories (§6.1), accumulated in float64."""
    if not directories:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for directory in directories:
        try:
            weights = load_file(str(Path(directory) / WEIGHTS))
        except SafetensorError as err:
            raise ValueError(f"{Path(directory) / WEIGHTS}: unreadable ({err})") from None
        if total and weights.keys() != total.keys():
            raise ValueError(f"{directory}: its weights do not match those of {directories[0]}")
        for name, tensor in weights.items():
            if name in total and tensor.shape != total[name].shape:
                raise ValueError(
                    f"{directory}: {name} is {tuple(tensor.shape)}, in {directories[0]} "
                    f"{tuple(total[name].shape)}: models of different sizes cannot be averaged"
                )
            total[name] = total.get(name, 0) + tensor.double()
            dtypes.setdefault(name, tensor.dtype)
    return {name: (t / len(directories)).to(dtypes[name]) for name, t in total.items()}


def average_checkpoints(directories: list[Path], out: Path, tokenizer=None) -> Path:
    """Write the mean of the checkpoints' weights as a model directory (config and vocabulary of the last).

    Only model.safetensors, config.json and spm.model (or, given, tokenizer's files: `marian.save_tokenizer`)
    are written in out, each atomically; the weights go last, so a kill leaves the earlier model or the new
    one's files beside the old weights.
    """
    averaged = average_weights(directories)
    faults.point("average.after-mean")
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "spm.model") if tokenizer is None else ("config.json",):
        source = Path(directories[-1]) / name
        if source.is_file() and source.resolve() != (out / name).resolve():
            write_atomic(out / name, source.read_bytes())
    if tokenizer is not None:  # a parser's or a fine-tuned Marian model's: kept beside the run, not in checkpoints
        from ..model_folder import save_tokenizer

        save_tokenizer(tokenizer, out)
    tmp = temporary_beside(out / WEIGHTS)
    try:
        save_tensors(averaged, tmp, metadata={"format": "pt"})
        faults.point("average.partial", partial=tmp)
        faults.point("average.before-rename")
        os.replace(tmp, out / WEIGHTS)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    faults.point("average.after-weights")
    return out
