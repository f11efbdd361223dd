"""Decoding's weights on huge pages. Not in the paper: a speed measure (docs/translation.md, "Weights on huge pages").

A decoding step at batch 1 reads every weight once (207 MB at opus-mt's shapes), so its products are
bound by how fast memory streams in. On 4 KiB pages every 4 KiB read needs its own address
translation; on 2 MiB pages one translation covers 512 times as much. On a 2-core EPYC host aiayn's
product (`gemv.c`) read the decoder's matrices 20-30% faster and the vocabulary 15% faster from 2 MiB
pages, and greedy search at batch 1 took 1.16-1.30x less time a token.

Linux gives a process 2 MiB pages for the memory it marks with madvise(MADV_HUGEPAGE) where transparent
huge pages are "madvise" or "always" (/sys/kernel/mm/transparent_hugepage/enabled; most distributions
ship one of the two). `on_huge_pages(model)` puts the model's weights there:

- a tensor of `IN_PLACE_BYTES` or more (the vocabulary) stays where it is: MADV_COLLAPSE (Linux 6.1 and
  later) moves the 2 MiB-aligned part of its memory onto huge pages, one 2 MiB block at a time;
- smaller parameters (the layers' matrices: no 2 MiB block lies inside one) are copied into one mapping
  of their own, marked before it is written, and each parameter is pointed at its copy (`param.data`:
  every module holding the parameter sees it); the old memory is freed as the copies are made.

Values, shapes and dtypes do not change, so a model's outputs are the same bit for bit. Tensors still in a
mapped file (`io.MappedReads` before `detach`) are left alone. Nothing is done off Linux, on other devices,
where transparent huge pages are "never", or with AIAYN_HUGE_PAGES=0.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import math
import mmap
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..io import trim_heap

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # Linux's asm-generic values (x86-64 and AArch64 use them)
IN_PLACE_BYTES = 8 << 20  # from this size on a tensor is collapsed where it is, not copied
SMALLEST = 64 << 10  # smaller tensors (biases, norms) are left where they are
THP = Path("/sys/kernel/mm/transparent_hugepage")


@dataclass
class HugePages:
    """What `on_huge_pages` did: bytes of tensors collapsed in place and bytes copied onto huge pages; and the
    2 MiB pages the process holds afterwards (AnonHugePages), or why nothing was done."""

    collapsed: int = 0
    moved: int = 0
    resident: int = 0
    why_not: str | None = None

    def __str__(self) -> str:
        if self.why_not:
            return f"no huge pages ({self.why_not})"
        return f"{self.resident / 2**20:,.0f} MiB on huge pages"


def why_not() -> str | None:
    """Why this process cannot have its weights on huge pages, or None where it can."""
    if os.environ.get("AIAYN_HUGE_PAGES", "1") == "0":
        return "AIAYN_HUGE_PAGES=0"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return "only on Linux, x86-64 or AArch64"
    if _libc() is None:
        return "no madvise in the C library"
    try:
        if "[never]" in (THP / "enabled").read_text():
            return "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled: never)"
        size = pmd_size()
        per_size = THP / f"hugepages-{size // 1024}kB" / "enabled"  # Linux 6.8+: a setting for each size too
        if per_size.is_file() and "[never]" in per_size.read_text():
            return f"transparent huge pages are off ({per_size}: never)"
    except OSError:
        return "no transparent huge pages (/sys/kernel/mm/transparent_hugepage)"
    return None


def pmd_size() -> int:
    """The size of a huge page: 2 MiB on x86-64 (and AArch64 with 4 KiB pages)."""
    try:
        return int((THP / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


@functools.lru_cache(maxsize=1)
def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError):
        return None


def _advise(address: int, nbytes: int, advice: int, huge: int) -> bool:
    """madvise over the huge-page-aligned part of [address, address + nbytes); whether it took."""
    first = -(-address // huge) * huge
    last = (address + nbytes) // huge * huge
    return last > first and _libc().madvise(first, last - first, advice) == 0


@torch.no_grad()
def on_huge_pages(model: nn.Module) -> HugePages:
    """The model's weights on huge pages, in place, as this module's docstring says; what was done."""
    why = why_not()
    if why is not None:
        return HugePages(why_not=why)
    huge = pmd_size()
    owners: dict[int, dict[int, Tensor]] = {}  # storage address -> the distinct tensors on it, by id
    for t in _tensors(model):
        if t.device.type == "cpu" and t.layout == torch.strided:
            owners.setdefault(t.untyped_storage().data_ptr(), {})[id(t)] = t
    done, small, files = HugePages(), [], _file_mappings()
    for address, on_it in owners.items():
        t, *others = on_it.values()
        nbytes = t.untyped_storage().nbytes()
        if _inside(address, files):
            continue  # a view of a mapped file (`io.MappedReads`, before `detach`): its pages are the file's
        if nbytes >= IN_PLACE_BYTES:
            _advise(address, nbytes, MADV_HUGEPAGE, huge)  # khugepaged's work, where MADV_COLLAPSE is unknown
            if _advise(address, nbytes, MADV_COLLAPSE, huge):
                done.collapsed += nbytes
        elif nbytes >= SMALLEST and not others and isinstance(t, nn.Parameter) and _whole(t):
            small.append(t)  # a parameter alone on its storage is copied; a buffer, a view or a shared storage stays
    if small:
        done.moved = _move(small, huge)
    done.resident = resident_huge_bytes()
    return done


def _inside(address: int, ranges: list[tuple[int, int]]) -> bool:
    """Whether address lies in one of ranges (sorted, not overlapping)."""
    i = bisect.bisect_right(ranges, (address, math.inf)) - 1
    return i >= 0 and ranges[i][0] <= address < ranges[i][1]


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of files (/proc/self/maps, in address order), left alone."""
    ranges = []
    for line in Path("/proc/self/maps").read_text(errors="replace").splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path
        if len(fields) == 6 and fields[4] != "0":  # an inode: a file (anonymous memory and [heap] have none)
            first, last = fields[0].split("-")
            ranges.append((int(first, 16), int(last, 16)))
    return ranges


def _tensors(model: nn.Module):
    """Every tensor model's modules hold: parameters, buffers, tensors kept as plain attributes, and those of
    the objects they keep that are not modules (`packed.PackedFloat32.blocks`: the packed vocabulary's memory)."""
    for module in model.modules():
        yield from (t for t in module._parameters.values() if t is not None)
        yield from (t for t in module._buffers.values() if t is not None)
        for value in vars(module).values():
            if isinstance(value, Tensor):
                yield value
            elif not isinstance(value, (nn.Module, type, dict, list, tuple)) and hasattr(value, "__dict__"):
                yield from (v for v in vars(value).values() if isinstance(v, Tensor))


def _whole(t: Tensor) -> bool:
    """Whether t is its storage's only contents, from its first byte to its last, row-major or (a matrix)
    column-major (`layout.column_major`, MKL's layers)."""
    dense = t.is_contiguous() or (t.dim() == 2 and t.t().is_contiguous())
    return dense and t.storage_offset() == 0 and t.numel() * t.element_size() == t.untyped_storage().nbytes()


def _move(params: list[nn.Parameter], huge: int) -> int:
    """params copied into one private anonymous mapping marked MADV_HUGEPAGE before it is written, each
    parameter pointed at its copy; returns the bytes moved. The mapping lives as long as a tensor views it."""
    align = 64  # a cache line: every copy starts on one
    sizes = [-(-p.numel() * p.element_size() // align) * align for p in params]
    area = mmap.mmap(-1, sum(sizes) + huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = torch.frombuffer(area, dtype=torch.uint8)  # (bytes,), holds the mapping
    offset = -base.data_ptr() % huge  # the first copy starts a huge page
    _advise(base.data_ptr(), base.numel(), MADV_HUGEPAGE, huge)
    moved = 0
    for p, size in zip(params, sizes):
        nbytes = p.numel() * p.element_size()
        copy = base[offset : offset + nbytes].view(p.dtype).as_strided(p.shape, p.stride())  # p's layout
        copy.copy_(p.data)
        p.data = copy  # the old memory goes with the last reference to it
        trim_heap()  # and freed heap blocks back to the system after each copy: peak memory no higher than before
        offset += size
        moved += nbytes
    return moved


def resident_huge_bytes() -> int:
    """The bytes of this process's anonymous memory on huge pages now (/proc/self/smaps_rollup), 0 if unknown."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
