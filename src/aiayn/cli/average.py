"""`aiayn average RUN_OR_DIRS... --out DIR [--last K]`: the mean of checkpoints' weights (§6.1)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+",
                        help="model directories to average, or a training output folder (its last K checkpoints)")
    parser.add_argument("--out", required=True, help="the averaged model directory to write")
    parser.add_argument("--last", type=int, default=5, help="checkpoints to take from a training folder (5 base, 20 big)")
    parser.add_argument("--force", action="store_true", help="replace the model files of a model already in --out")


def run(args: argparse.Namespace) -> int:
    from ..train.checkpoint import average_checkpoints, checkpoints_to_average
    from .convert import check_output

    directories: list[Path] = []
    for item in map(Path, args.inputs):
        if (item / "checkpoints").is_dir():
            directories += checkpoints_to_average(item / "checkpoints", args.last)  # near-duplicates left out
        elif (item / "model.safetensors").is_file():
            directories.append(item)
        else:
            raise FileNotFoundError(f"{item}: neither a model directory nor a training folder with checkpoints/")
    if args.last < 1:
        raise ValueError(f"--last {args.last}: take at least one checkpoint")
    if not directories:
        raise FileNotFoundError(f"{', '.join(args.inputs)}: no checkpoints to average")
    same_model(directories)
    out = Path(args.out)
    for directory in directories:  # writing into a checkpoint being averaged could destroy it
        check_output(directory, out)
    there = [name for name in WRITTEN if (out / name).exists()]
    if there and not args.force:
        raise ValueError(f"{out} already holds {', '.join(there)}; pass --force to replace them")
    average_checkpoints(directories, out)
    print(f"{args.out}: the mean of {len(directories)} checkpoint(s): {', '.join(str(d) for d in directories)}")
    return 0


WRITTEN = ("model.safetensors", "config.json", "spm.model")  # what average_checkpoints writes in --out


def same_model(directories: list[Path]) -> None:
    """Every directory an aiayn model of one configuration and one vocabulary: their mean is then a model."""
    from ..io import is_aiayn_model, read_model_config

    def identity(directory: Path) -> tuple[dict, bytes | None]:
        if not is_aiayn_model(directory):
            raise ValueError(f"{directory}: not an aiayn model directory (a Marian one? `aiayn convert` it first)")
        vocab = directory / "spm.model"
        return read_model_config(directory).to_dict(), vocab.read_bytes() if vocab.is_file() else None

    first = directories[0]
    config, vocab = identity(first)
    for directory in directories[1:]:
        other, other_vocab = identity(directory)
        if other != config:
            changed = ", ".join(sorted(k for k in config.keys() | other.keys() if config.get(k) != other.get(k)))
            raise ValueError(f"{directory}: another model configuration than {first} ({changed}); only checkpoints "
                             "of one model can be averaged")
        if other_vocab != vocab:
            raise ValueError(f"{directory}: another vocabulary (spm.model) than {first}; their weights mean other pieces")
