"""Checks of the paths a command is given, made before any work: one line naming the flag and the path."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from ..files import temporary_beside


def input_file(text: str) -> str:
    """An argparse type: a file (or a pipe such as bash's `<(cmd)`) that exists and is not a directory."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a text file")
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def output_file(text: str) -> str:
    """An argparse type: a file to write, not a directory, in a folder that exists."""
    out = Path(text)
    if out.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give the name of the file to write")
    if not out.parent.is_dir():
        what = "is a file, not a folder" if out.parent.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text}: its folder {out.parent} {what}")
    return text


def check_output_folder(path: str | Path, flag: str) -> None:
    """path is a folder to write into (or to make): neither it nor a folder above it is a file."""
    path = Path(path)
    for folder in (path, *path.parents):
        if folder.exists() and not folder.is_dir():
            where = "it" if folder == path else str(folder)
            raise NotADirectoryError(f"{flag} {path}: {where} is a file, not a folder")
        if folder.exists():
            return


@contextlib.contextmanager
def text_output(path: str | None) -> Iterator[TextIO]:
    """stdout as UTF-8, or the file at path written whole or not at all (a temporary beside it, then renamed)."""
    if path is None:
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(encoding="utf-8")
        yield sys.stdout
        return
    tmp = temporary_beside(path)
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as out:
            yield out
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
