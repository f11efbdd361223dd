"""Checks of the paths a command is given, made before any work: one line naming the flag and the path."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from ..files import temporary_beside


def input_file(text: str) -> str | None:
    """An argparse type: a file (or a pipe such as bash's `<(cmd)`) that exists and is not a directory; "-" is
    standard input (None)."""
    if text == "-":
        return None
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a text file")
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def output_file(text: str) -> str:
    """An argparse type: a file to write (or "-", standard output), not a directory, in a folder that exists."""
    if text == "-":
        return text
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


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same resolved path, or the same inode (a hard link)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # b does not exist yet
        return False


@contextlib.contextmanager
def text_output(path: str | None) -> Iterator[TextIO]:
    """stdout as UTF-8 (path None or "-"), or the file at path written whole or not at all: a temporary beside it,
    renamed onto it when complete.

    What is at path is written as the user would expect of `> path`, never replaced by something else:
    `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` are the process's own open files, written through a copy of their
    descriptor (a file that stdout appends to is appended to, not renamed over); a device, FIFO or socket
    (`/dev/null`, bash's `>(cmd)`) is written into as the lines come; a symlink's target is written and the link
    kept; an existing file keeps its permissions. A file this user may not write, or one with other hard links
    (renaming onto one name would leave the others the old text), is refused.
    """
    if path is None or path == "-":
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(encoding="utf-8")
        yield sys.stdout
        return
    fd = _descriptor(path)
    if fd is not None:
        with os.fdopen(os.dup(fd), "w", encoding="utf-8", newline="\n") as out:
            yield out
        return
    if os.path.exists(path) and not os.path.isfile(path):  # not a regular file (after symlinks): no rename onto it
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            yield out
        return
    target, mode = Path(os.path.realpath(path)), None
    if target.exists():
        info = target.stat()
        writable = os.access(target, os.W_OK) and (os.geteuid() != 0 or info.st_mode & 0o222)  # root: the mode's word
        if not writable:
            raise PermissionError(
                errno.EACCES, "not writable by this user; not written over (chmod u+w to let it be)", path
            )
        if info.st_nlink > 1:
            raise PermissionError(
                errno.EMLINK,
                f"has {info.st_nlink} hard links, which a new file would leave "
                "holding the old text; write to another name",
                path,
            )
        mode = stat.S_IMODE(info.st_mode)
    tmp = temporary_beside(target)
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as out:
            yield out
        if mode is not None:
            os.chmod(tmp, mode)  # after writing: a mode without the owner's write bit would have refused the writes
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _descriptor(path: str) -> int | None:
    """The file descriptor a path names (`/dev/stdout` 1, `/dev/stderr` 2, `/dev/fd/N`, `/proc/self/fd/N`), else None.
    Resolved, those paths lead to whatever the descriptor holds, which a rename would replace."""
    named = {"/dev/stdout": 1, "/dev/stderr": 2}
    if path in named:
        return named[path]
    for prefix in ("/dev/fd/", "/proc/self/fd/", f"/proc/{os.getpid()}/fd/"):
        if path.startswith(prefix) and path[len(prefix) :].isdigit():
            return int(path[len(prefix) :])
    return None
