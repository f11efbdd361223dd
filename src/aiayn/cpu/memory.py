"""This process's memory: the C heap given back (glibc's malloc_trim), its mappings (/proc/self/maps), and
weights read as views of memory-mapped files (`MappedReads`, for int8 loading a layer at a time).

Linux and glibc where they are there; elsewhere each call does nothing or says it cannot.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..weights import DTYPES, read_header, with_aliases


def trim_heap() -> None:
    """Return the C heap's free memory to the system (glibc's malloc_trim; nothing elsewhere).

    glibc keeps large freed blocks in the process once a block that size has been freed (its mmap threshold
    rises), so a loader's temporaries would raise the resident memory for good, and each decoding batch's
    buffers would land partly in new pages (`CpuStep.start` calls this first).
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


@functools.lru_cache(maxsize=1)
def libc() -> ctypes.CDLL | None:
    """The C library this process already has (nothing new is loaded), madvise's argument types set; None where
    there is none to ask (Windows)."""
    try:
        library = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if hasattr(library, "madvise"):
        library.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        library.madvise.restype = ctypes.c_int
    return library


_malloc_trim = getattr(libc(), "malloc_trim", None)  # glibc's; not in musl, macOS or Windows


class Mapping(NamedTuple):
    """One of this process's memory mappings: [start, end), its permissions ("r-xp"), the file's inode ("0" for
    anonymous memory), its path ("" for none), and with details /proc/self/smaps's figures in kB ("Rss", ...)."""

    start: int
    end: int
    perms: str
    inode: str
    path: str
    kib: dict[str, int]


def mappings(details: bool = False) -> list[Mapping]:
    """This process's memory mappings in address order, from /proc/self/maps, or with details from /proc/self/smaps
    (each mapping's figures in kB). Linux only: OSError elsewhere."""
    found: list[Mapping] = []
    for line in Path("/proc/self/smaps" if details else "/proc/self/maps").read_text(errors="replace").splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path (which may hold spaces)
        if not fields:
            continue
        if not fields[0].endswith(":"):  # a mapping's first line; smaps's figures follow as "Name: value kB"
            start, end = (int(a, 16) for a in fields[0].split("-"))
            found.append(Mapping(start, end, fields[1], fields[4], fields[5].strip() if len(fields) == 6 else "", {}))
        elif found and len(fields) > 1 and fields[1].isdigit():
            found[-1].kib[fields[0][:-1]] = int(fields[1])
    return found


class MappedReads:
    """A reader whose tensors are views of memory-mapped files, so that only what is used is in memory.

        maps = MappedReads()
        model = load_model(directory, read=maps.read)   # the weights themselves are not read yet
        ...                                             # use the weights; maps.release() now and then
        maps.detach(model)                              # copy what the model still holds out of the files

    The int8 loader uses this (aiayn.cpu.quantize): it quantises a block of the vocabulary or one
    linear layer at a time and calls `release()` after each, so the float32 weights are never all in
    memory at once. The maps are private (copy-on-write): the files never change. `release()` gives
    back the pages read so far; a later read maps the file's contents again (so changes written into
    a mapped tensor are dropped: release only what nothing will read again). `detach` leaves the
    model with no tensor in a mapped file, so that a file later changed on disk cannot reach it.
    """

    def __init__(self) -> None:
        self.maps: list[tuple[mmap.mmap, int, int]] = []  # (map, first address, length)

    def read(self, path: str | Path) -> dict[str, Tensor]:
        """The tensors of a safetensors file as views of its private map (a `Reader`)."""
        path = Path(path)
        with open(path, "rb") as f:
            start, header, metadata = read_header(f, path)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        length = len(mapped)
        self.maps.append((mapped, torch.frombuffer(mapped, dtype=torch.uint8, count=1).data_ptr(), length))
        tensors = {}
        for name, info in header.items():
            dtype, shape, (begin, end) = DTYPES[info["dtype"]], info["shape"], info["data_offsets"]
            n = math.prod(shape)
            if end - begin != n * dtype.itemsize or start + end > length:
                raise ValueError(f"{path}: {name}: the file ends before this tensor does (truncated?)")
            view = (
                torch.frombuffer(mapped, dtype=dtype, count=n, offset=start + begin)
                if n
                else torch.empty(0, dtype=dtype)
            )
            tensors[name] = view.view(shape)
        return with_aliases(tensors, metadata)

    def holds(self, t: Tensor) -> bool:
        """Whether t's memory lies in one of the mapped files."""
        address = t.untyped_storage().data_ptr()
        return any(first <= address < first + length for _, first, length in self.maps)

    def release(self) -> None:
        """Give back the mapped pages read so far (a later read maps them again), and the heap memory
        freed since: the temporaries of quantising a layer would otherwise stay in the process."""
        self._drop_pages()
        trim_heap()

    def _drop_pages(self) -> None:
        """Unmap the pages of the files read so far (a later read maps them again)."""
        for mapped, _, _ in self.maps:
            if hasattr(mapped, "madvise"):  # Linux, macOS; elsewhere the pages stay until the map goes
                mapped.madvise(mmap.MADV_DONTNEED)

    def detach(self, model: nn.Module) -> None:
        """Every parameter and buffer of model still in a mapped file copied into memory of its own.

        The pages read are given back after each copy: a read maps the block of the file's page cache around
        what it reads (more where the kernel caches the file in large blocks), which small tensors (biases,
        norms) would otherwise hold through the load's peak (docs/studies/translation-memory.md)."""
        for module in model.modules():
            for name, t in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
                if self.holds(t):
                    copy = t.detach().clone()
                    setattr(
                        module, name, nn.Parameter(copy, requires_grad=False) if isinstance(t, nn.Parameter) else copy
                    )
                    self._drop_pages()
        self.maps.clear()  # the maps close once no tensor views them
