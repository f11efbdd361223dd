"""Files as aiayn reads and writes them: text read a line at a time with its errors named by line, and temporary
files beside the files they become, so that every file aiayn writes is written whole or not at all."""

from __future__ import annotations

import errno
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once, at import: os.umask can only be read by setting it


def open_mode() -> int:
    """The permissions open() gives a new file: 0666 less the umask."""
    return 0o666 & ~UMASK


def temporary_beside(path: str | Path) -> Path:
    """A new empty file in path's folder, `.NAME.HOST-PID.XXXXXXXX.aiayn.tmp`, that no other file had as its name.

    What is written there is renamed onto path when whole. mkstemp creates the name exclusively, so a
    user's own `out.txt.tmp` is never written over or removed; the file gets the permissions that
    open() would have given path (0666 less the umask), not mkstemp's 0600. The writer's host and process id
    are in the name, so that `sweep_temporaries` leaves a live writer's file alone, and any other host's.
    """
    path = Path(path)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{HOST}-{os.getpid()}.", suffix=SUFFIX)
    except OSError as err:  # named by the file asked for, not by the temporary's random name
        raise type(err)(err.errno, err.strerror, str(path)) from None
    os.fchmod(fd, open_mode())
    os.close(fd)
    return Path(name)


def with_default_mode(path: str | Path) -> None:
    """Give path the permissions open() would have given it (0666 less the umask). safetensors' save_file makes its
    file anew with mode 0600 whatever was there, so a model or checkpoint written through it would be readable by
    its owner alone, where every other file aiayn writes beside it is as the umask says."""
    os.chmod(path, open_mode())


SUFFIX = ".aiayn.tmp"
HOST = (
    re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"
)  # a folder on a network file system has writers elsewhere
TEMPORARY = re.compile(r"^\..+\.([A-Za-z0-9_]+)-(\d+)\.[a-z0-9_]{8}\.aiayn\.tmp$")  # temporary_beside's names


def _alive(pid: int) -> bool:
    """Whether a process with this id runs (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def sweep_temporaries(folder: Path) -> list[Path]:
    """Remove what temporary_beside left in folder (and below) when a process was killed mid-write.

    Only names of temporary_beside's pattern are touched (aiayn's own suffix: a user's `.notes.abcdefgh.tmp`
    is not one), and only those written on this host by a process no longer running: another aiayn command
    writing into the folder (`aiayn translate -o RUN/test.hyp` beside a training run), here or on another machine
    that shares the folder, keeps its file. Returns what was removed.
    """
    removed = []
    for path in sorted(Path(folder).rglob("*" + SUFFIX)):
        match = TEMPORARY.match(path.name)
        if (
            match
            and match.group(1) == HOST
            and path.is_file()
            and not path.is_symlink()
            and not _alive(int(match.group(2)))
        ):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def read_text_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines without their line ends (and without a UTF-8 byte order mark before the first); a line that is not
    UTF-8 is an error naming it."""
    for line_number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if line_number == 1 and raw.startswith(b"\x1f\x8b"):  # gzip's magic number
                raise ValueError(
                    f"{name}: gzip-compressed; translate reads plain text: `zcat {name} | aiayn translate ...`"
                ) from None
            raise ValueError(
                f"{name}: line {line_number}: not valid UTF-8 ({err.reason} at byte {err.start})"
            ) from None
        yield (line.removeprefix("\ufeff") if line_number == 1 else line).rstrip("\r\n")


def fsync_folder(path: Path) -> None:
    """fsync a folder, so that the renames in it are on disk; a system that cannot sync a folder is passed over."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)
