"""`aiayn train RECIPE [--out DIR] [--init DIR] [--section.field=value ...]`: train or resume (§5)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="a recipe YAML file, e.g. recipes/multi30k-en-de.yaml")
    parser.add_argument("--out", help="output folder (default runs/<recipe name>); run again to resume")
    parser.add_argument(
        "--init", help="start from an aiayn model directory, a Hugging Face Marian one, or a hub id (opus-mt)"
    )
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="recipe overrides such as --train.max_minutes=30 --model.d_model=256",
    )
    parser.set_defaults(_help=parser.format_help)  # `train RECIPE --help`: REMAINDER swallows --help


def run(args: argparse.Namespace) -> int:
    from ..train import distributed
    from ..train.loop import train

    # The overrides swallow whatever follows the recipe, so --out and --init are picked out of them.
    options = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    options.add_argument("--out", default=args.out)
    options.add_argument("--init", default=args.init)
    known, overrides = options.parse_known_args(args.overrides)
    if "-h" in overrides or "--help" in overrides:
        print(args._help(), end="")
        return 0
    recipe = _checked_recipe(args.recipe, overrides, known.out)
    if known.init is not None:  # a hub id: its folder in the cache (a local folder wins)
        from ..model_folder import resolve

        known.init = str(resolve(known.init))
    out = Path(known.out) if known.out else Path("runs") / Path(args.recipe).stem
    try:
        train(recipe, out, init=known.init, recipe_file=args.recipe)
    except OSError as err:  # a full disk, a read-only folder: one line; what was saved before stays
        if isinstance(err, FileNotFoundError):
            raise
        print(
            f"aiayn train: error: {err.filename + ': ' if err.filename else ''}{err.strerror or err}", file=sys.stderr
        )
        return 1
    distributed.exit_rank(0)  # under torchrun: every file is written and closed; see exit_rank
    return 0


def _checked_recipe(path: str, overrides: list[str], out: str | None):
    """The recipe, checked for what would otherwise fail only after minutes of work: --out must be a
    folder (or not exist yet), and each split the recipe names is there with text (format ptb: .mrg files in the
    treebank archive)."""
    from ..data.sources import Source, check_spec
    from ..recipe import load_recipe
    from .paths import check_output_folder

    recipe = load_recipe(path, overrides)
    check_output_folder(out or Path("runs") / Path(path).stem, "--out")
    d = recipe.data
    for field in ("train", "valid", "test"):
        if not getattr(d, field) and field == "test":
            continue
        if d.format == "ptb":  # ranges of .mrg files in a treebank archive, not file prefixes
            from ..parse.trees import check_treebank_split

            check_treebank_split(d.archive, getattr(d, field), f"data.{field}")
            if field == "train" and d.silver:  # read once now: a line that is not a tree is named before any work
                from ..parse.silver import read_trees

                if not Path(d.silver).is_file():
                    raise FileNotFoundError(f"data.silver {d.silver}: no such file (`aiayn silver` writes one)")
                held = len(read_trees(d.silver, d.silver_trees))
                if d.silver_trees and held < d.silver_trees:
                    raise ValueError(f"data.silver_trees {d.silver_trees:,}: {d.silver} holds {held:,} trees")
        else:
            check_spec(getattr(d, field), f"data.{field}")
            Source(getattr(d, field), d.src_lang, d.tgt_lang, f"data.{field}").check()
    return recipe
