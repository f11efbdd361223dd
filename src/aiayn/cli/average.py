"""`aiayn average RUN_OR_DIRS... --out DIR [--last K]`: the mean of checkpoints' weights (§6.1)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .options import at_least


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs", nargs="+", help="model directories to average, or a training output folder (its last K checkpoints)"
    )
    parser.add_argument("--out", required=True, help="the averaged model directory to write")
    parser.add_argument(
        "--last", type=at_least(1), default=5, help="checkpoints to take from a training folder (5 base, 20 big)"
    )
    parser.add_argument("--force", action="store_true", help="replace the model files of a model already in --out")


def run(args: argparse.Namespace) -> int:
    from ..model_folder import TOKENIZER_FILES
    from ..train.checkpoint import average_checkpoints, checkpoints_to_average
    from .convert import check_output

    directories: list[Path] = []
    homes_of = []  # (input, where its tokenizer may be, whether it must have one) for each input that gave checkpoints
    for item in map(Path, args.inputs):
        if (item / "checkpoints").is_dir():
            found = checkpoints_to_average(item / "checkpoints", args.last)  # near-duplicates left out
            homes, from_a_run = found[-1:] + [item / "model", item], True
        elif (item / "model.safetensors").is_file():
            found, run_folder = [item], run_of(item)
            homes, from_a_run = ([item, run_folder / "model", run_folder], True) if run_folder else ([item], False)
        else:
            raise FileNotFoundError(f"{item}: neither a model directory nor a training folder with checkpoints/")
        directories += found
        if found:
            homes_of.append((item, homes, from_a_run))
    if not directories:
        raise FileNotFoundError(f"{', '.join(args.inputs)}: no checkpoints to average")
    same_model(directories)
    tokenizer = same_tokenizer([(item, tokenizer_of(homes, required)) for item, homes, required in homes_of])
    out = Path(args.out)
    for directory in directories:  # writing into a checkpoint being averaged could destroy it
        check_output(directory, out)
    there = [name for name in (*WRITTEN, *TOKENIZER_FILES) if (out / name).exists()]
    if there and not args.force:
        raise ValueError(f"{out} already holds {', '.join(there)}; pass --force to replace them")
    average_checkpoints(directories, out, tokenizer)
    print(f"{args.out}: the mean of {len(directories)} checkpoint(s): {', '.join(str(d) for d in directories)}")
    return 0


def run_of(checkpoint: Path) -> Path | None:
    """The training folder whose checkpoints/ holds checkpoint, if it is one (run.json beside checkpoints/)."""
    from ..train.run_folder import RECORD

    folder = checkpoint.parent.parent
    return folder if checkpoint.parent.name == "checkpoints" and (folder / RECORD).is_file() else None


def tokenizer_of(homes: list[Path], required: bool):
    """The tokenizer to write beside the mean: the first found in homes (a checkpoint, then its training folder's
    final model and the folder itself, where a parsing run and a run from --init keep theirs). None where model
    directories saved without one (from Python) are averaged; a run's checkpoints without one would give a mean
    that cannot be read as text, so they are refused (required) before anything is written."""
    from ..model_folder import load_tokenizer

    for home in homes:
        try:
            return load_tokenizer(home)
        except FileNotFoundError:
            continue
    if not required:
        return None
    raise FileNotFoundError(
        f"no tokenizer (spm.model, Marian's vocab.json and spm files, or a parser's parse-target.json) "
        f"in {', '.join(map(str, homes))}; the averaged weights could not be used without it"
    )


def same_tokenizer(tokenizers: list):
    """The one tokenizer of every input that has one; inputs with different tokenizers are refused by name (their
    weights mean other pieces or symbols)."""
    from ..model_folder import tokenizer_files

    known = [(item, tokenizer, tokenizer_files(tokenizer)) for item, tokenizer in tokenizers if tokenizer is not None]
    for item, _, files in known[1:]:
        if files != known[0][2]:
            raise ValueError(f"{item}: another tokenizer than {known[0][0]}; their weights mean other pieces")
    return known[-1][1] if known else None


WRITTEN = ("model.safetensors", "config.json")  # what average_checkpoints writes in --out, besides a tokenizer's files


def same_model(directories: list[Path]) -> None:
    """Every directory an aiayn model of one configuration and one vocabulary: their mean is then a model."""
    from ..weights import is_aiayn_model, read_model_config

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
            raise ValueError(
                f"{directory}: another model configuration than {first} ({changed}); only checkpoints "
                "of one model can be averaged"
            )
        if other_vocab != vocab:
            raise ValueError(
                f"{directory}: another vocabulary (spm.model) than {first}; their weights mean other pieces"
            )
