"""The `aiayn` command: one subcommand per module, each with add_arguments(parser) and run(args)."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import threading

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
    "silver": ("silver", "parse unlabelled English with a treebank PCFG: silver trees for a parser (§6.3)"),
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
        prog="aiayn", description='The Transformer of "Attention Is All You Need": train, translate, evaluate, convert.'
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        importlib.import_module(f"aiayn.cli.{module}").add_arguments(sub_parser)
    return parser


# What bad input raises (a user's file, flag or recipe): one line `aiayn CMD: error: ...`, no traceback.
# Anything else is a bug in aiayn and keeps its traceback.
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    yaml.YAMLError,
)
SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool stopped by a closed pipe
# The machine's, not aiayn's: a full disk, a quota, a read-only file system, a file too large. One line, exit 1.
ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


class Terminated(BaseException):
    """SIGTERM or SIGHUP (`timeout`, a closed terminal), raised where the program is, so that its cleanups run: a
    half-written output's temporary file is removed, as after Ctrl-C. A BaseException, as KeyboardInterrupt is:
    no `except Exception` takes it for an error of its own. A Python handler runs between bytecodes, so a long
    C call (SentencePiece training) finishes first: `timeout -k` still kills."""


# The commands whose output a signal should not leave half-written. `train` survives any kill by design (a rerun
# resumes, and sweeps what the kill left), `serve` has uvicorn's own shutdown, `paper` runs worker processes.
CLEANS_UP_ON_SIGNALS = {"translate", "parse", "evaluate", "average", "convert", "info", "copy-demo"}


def _terminated(signum: int, frame) -> None:
    raise Terminated(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = {}
    if args.command in CLEANS_UP_ON_SIGNALS and threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGHUP):  # not where they are ignored: `nohup aiayn ...` stays so
            if signal.getsignal(s) is signal.SIG_DFL:
                previous[s] = signal.signal(s, _terminated)
    try:
        return importlib.import_module(f"aiayn.cli.{args._module}").run(args) or 0
    except USER_ERRORS as err:  # bad input: a clear message, no traceback
        print(f"aiayn {args.command}: error: {error_text(err)}", file=sys.stderr)
        return 2
    except Terminated as err:
        print(f"aiayn {args.command}: stopped by {err}", file=sys.stderr)
        return 128 + int(getattr(signal, str(err)))
    except BrokenPipeError:  # stdout closed early (`aiayn translate ... | head -1`): end quietly, as Unix tools do
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's final flush goes nowhere
        except (OSError, ValueError):
            pass
        return SIGPIPE_EXIT
    except OSError as err:  # after BrokenPipeError, which is one
        if err.errno not in ENVIRONMENT_ERRNOS:
            raise
        print(f"aiayn {args.command}: error: {error_text(err)}", file=sys.stderr)  # the disk, not aiayn
        return 1
    except KeyboardInterrupt as err:  # Ctrl-C; what was stopped, where it says (aiayn paper table3)
        if str(err):
            print(f"aiayn {args.command}: stopped: {err}", file=sys.stderr)
        return 130
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def error_text(err: Exception) -> str:
    """The message of err; an OSError as `FILE: what` rather than `[Errno 21] Is a directory: 'FILE'`."""
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        return f"{err.filename}: {err.strerror}" + (f" -> {err.filename2}" if err.filename2 else "")
    if isinstance(err, yaml.YAMLError):  # one that recipe.py did not turn into a line of its own
        return " ".join(str(err).split())
    return str(err)
