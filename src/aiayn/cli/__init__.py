"""The `aiayn` command: one subcommand per module, each with add_arguments(parser) and run(args)."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module under aiayn.cli, one-line help). Each module is imported to add its arguments; what is
# heavy to import (torch, the model) each imports inside run(), when its command runs.
COMMANDS = {
    "info": ("info", "print a model configuration and its parameter counts"),
    "copy-demo": ("copy_demo", "train a tiny model on the copy task and decode a few sequences"),
    "train": ("train", "train a translation model from a recipe, or resume it (§5)"),
    "average": ("average", "average the weights of the last checkpoints (§6.1)"),
    "translate": ("translate", "translate text with a model, one line per line (§6.1 beam search)"),
    "evaluate": ("evaluate", "score translations: sacreBLEU, tokenised BLEU, chrF, perplexity"),
    "convert": ("convert", "convert a model: Marian (opus-mt) <-> aiayn, and to CTranslate2"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of \"Attention Is All You Need\": train, translate, evaluate, convert."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        importlib.import_module(f"aiayn.cli.{module}").add_arguments(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return importlib.import_module(f"aiayn.cli.{args._module}").run(args) or 0
    except (ValueError, FileNotFoundError) as err:  # bad input: a clear message, no traceback
        print(f"aiayn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
