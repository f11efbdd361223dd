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
    from ..marian.convert import load_tokenizer, save_tokenizer, tokenizer_files
    from ..train.checkpoint import average_checkpoints, checkpoints_to_average
    from .convert import check_output

    directories: list[Path] = []
    homes: list[Path] = []  # where the last input's tokenizer may be, in order
    run = False  # whether the last input is a training folder
    for item in map(Path, args.inputs):
        if (item / "checkpoints").is_dir():
            directories += checkpoints_to_average(item / "checkpoints", args.last)  # near-duplicates left out
            homes, run = directories[-1:] + [item / "model", item], True
        elif (item / "model.safetensors").is_file():
            directories.append(item)
            homes, run = [item], False
        else:
            raise FileNotFoundError(f"{item}: neither a model directory nor a training folder with checkpoints/")
    if args.last < 1:
        raise ValueError(f"--last {args.last}: take at least one checkpoint")
    if not directories:
        raise FileNotFoundError(f"{', '.join(args.inputs)}: no checkpoints to average")
    same_model(directories)
    tokenizer = tokenizer_of(homes, load_tokenizer, required=run)
    out = Path(args.out)
    for directory in directories:  # writing into a checkpoint being averaged could destroy it
        check_output(directory, out)
    written = [*WRITTEN, *(tokenizer_files(tokenizer) if tokenizer is not None else ())]
    there = [name for name in dict.fromkeys(written) if (out / name).exists()]
    if there and not args.force:
        raise ValueError(f"{out} already holds {', '.join(there)}; pass --force to replace them")
    average_checkpoints(directories, out)
    if tokenizer is not None:  # a parser's or a fine-tuned Marian model's lives beside the run, not in its checkpoints
        save_tokenizer(tokenizer, out)
    print(f"{args.out}: the mean of {len(directories)} checkpoint(s): {', '.join(str(d) for d in directories)}")
    return 0


def tokenizer_of(homes: list[Path], load_tokenizer, required: bool):
    """The tokenizer to write beside the mean: the first found in homes (the last checkpoint, then a training
    folder's final model and the folder itself, where a parsing run and a run from --init keep theirs). None where
    the model directories averaged have none (models saved without one, from Python); a training folder's mean
    without one could not be read as text, so it is refused (required) before anything is written."""
    for home in homes:
        try:
            return load_tokenizer(home)
        except FileNotFoundError:
            continue
    if not required:
        return None
    raise FileNotFoundError(f"no tokenizer (spm.model, Marian's vocab.json and spm files, or a parser's parse-target.json) "
                            f"in {', '.join(map(str, homes))}; the averaged weights could not be used without it")


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
