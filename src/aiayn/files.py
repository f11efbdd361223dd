"""Temporary files beside the files they become: every file aiayn writes is written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once, at import: os.umask can only be read by setting it


def temporary_beside(path: str | Path) -> Path:
    """A new empty file in path's folder, `.NAME.XXXXXXXX.tmp`, that no other file had as its name.

    What is written there is renamed onto path when whole. mkstemp creates the name exclusively, so a
    user's own `out.txt.tmp` is never written over or removed; the file gets the permissions that
    open() would have given path (0666 less the umask), not mkstemp's 0600.
    """
    path = Path(path)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # named by the file asked for, not by the temporary's random name
        raise type(err)(err.errno, err.strerror, str(path)) from None
    os.fchmod(fd, 0o666 & ~UMASK)
    os.close(fd)
    return Path(name)
