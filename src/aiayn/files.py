"""Temporary files beside the files they become: every file aiayn writes is written whole or not at all."""

from __future__ import annotations

import os
import re
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


TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # temporary_beside's names: .NAME.XXXXXXXX.tmp


def sweep_temporaries(folder: Path) -> list[Path]:
    """Remove what temporary_beside left in folder (and below) when a process was killed mid-write.

    Only for a folder that one aiayn process holds (a locked run folder): another writer's temporary
    would go too. Only names of temporary_beside's pattern are touched. Returns what was removed.
    """
    removed = []
    for path in sorted(Path(folder).rglob(".*.tmp")):
        if path.is_file() and not path.is_symlink() and TEMPORARY.match(path.name):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
