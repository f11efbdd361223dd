"""The `aiayn` command: one subcommand per module, each with add_arguments(parser) and run(args)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import yaml

# name -> (module under aiayn.cli, one-line help). Each module is imported to add its arguments; what is
# heavy to import (torch, the model) each imports inside run(), when its command runs.
COMMANDS = {
    "info": ("info", "print a model configuration and its parameter counts"),
    "copy-demo": ("copy_demo", "train a tiny model on the copy task and decode a few sequences"),
    "train": ("train", "train a translation model from a recipe, or resume it (§5)"),
    "average": ("average", "average the weights of the last checkpoints (§6.1)"),
    "translate": ("translate", "translate text with a model, one line per line (§6.1 beam search)"),
    "evaluate": ("evaluate", "score translations: sacreBLEU, tokenised BLEU, chrF, perplexity"),
    "parse": ("parse", "parse tokenised sentences into trees, one line per line (§6.3)"),
    "convert": ("convert", "convert a model: Marian (opus-mt) <-> aiayn, and to CTranslate2"),
    "serve": ("serve", "a web page and JSON API: translate, attention, the beam tree, the paper's figures"),
    "paper": ("paper", "the paper's claims measured here: a report with figures (or: paper table3)"),
}


class Parser(argparse.ArgumentParser):
    """argparse with a two-line error (what is wrong, where to look) instead of the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="aiayn", description="The Transformer of \"Attention Is All You Need\": train, translate, evaluate, convert."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        importlib.import_module(f"aiayn.cli.{module}").add_arguments(sub_parser)
    return parser


# What bad input raises (a user's file, flag or recipe): one line `aiayn CMD: error: ...`, no traceback.
# Anything else is a bug in aiayn and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
               yaml.YAMLError)
SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool stopped by a closed pipe


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return importlib.import_module(f"aiayn.cli.{args._module}").run(args) or 0
    except USER_ERRORS as err:  # bad input: a clear message, no traceback
        print(f"aiayn {args.command}: error: {error_text(err)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout closed early (`aiayn translate ... | head -1`): end quietly, as Unix tools do
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's final flush goes nowhere
        except (OSError, ValueError):
            pass
        return SIGPIPE_EXIT
    except KeyboardInterrupt as err:  # Ctrl-C; what was stopped, where it says (aiayn paper table3)
        if str(err):
            print(f"aiayn {args.command}: stopped: {err}", file=sys.stderr)
        return 130


def error_text(err: Exception) -> str:
    """The message of err; an OSError as `FILE: what` rather than `[Errno 21] Is a directory: 'FILE'`."""
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        return f"{err.filename}: {err.strerror}" + (f" -> {err.filename2}" if err.filename2 else "")
    if isinstance(err, yaml.YAMLError):  # one that recipe.py did not turn into a line of its own
        return " ".join(str(err).split())
    return str(err)
