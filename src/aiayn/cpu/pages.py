"""Decoding's weights on huge pages. Not in the paper: a speed measure (docs/studies/translation-speed.md,
"Weights on huge pages").

A decoding step at batch 1 reads every weight once, so its products are bound by how fast memory streams in. On
4 KiB pages every 4 KiB read needs its own address translation; on 2 MiB pages one translation covers 512 times
as much, and the products read the matrices faster.

Linux gives a process 2 MiB pages for the memory it marks with madvise(MADV_HUGEPAGE) where transparent
huge pages are "madvise" or "always" (/sys/kernel/mm/transparent_hugepage/enabled; most distributions
ship one of the two). `on_huge_pages(model)` puts the model's weights there:

- a tensor of `IN_PLACE_BYTES` or more (the vocabulary) stays where it is: MADV_COLLAPSE (Linux 6.1 and
  later) moves the 2 MiB-aligned part of its memory onto huge pages, one 2 MiB block at a time;
- smaller parameters (the layers' matrices, 1-4 MiB: at most one aligned 2 MiB block lies inside one, the
  rest would stay on small pages) are copied into one mapping of their own, marked before it is written, and
  each parameter is pointed at its copy (`param.data`: every module holding the parameter sees it); the old
  memory is freed as the copies are made. A parameter whose memory another tensor also holds (a view, a
  second name, one the caller keeps) stays where it is: moving it would leave two copies.

Values, shapes and dtypes do not change, so a model's outputs are the same bit for bit. Tensors still in a
mapped file (`memory.MappedReads` before `detach`) are left alone. Nothing is done off Linux (x86-64, AArch64 with
4 KiB pages), on other devices, where transparent huge pages are "never" (for the system or, by prctl, for
this process), or with AIAYN_HUGE_PAGES=0; and it never raises (no memory for the new mapping: the weights
stay where they are, and `HugePages.why_not` says so). Saving one moved parameter alone with `torch.save`
writes the whole mapping, as for any view; `weights.save_model` is for models before `for_decoding`.
"""

from __future__ import annotations

import bisect
import functools
import math
import mmap
import os
import platform
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from .memory import libc, mappings, trim_heap

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # Linux's asm-generic values (x86-64 and AArch64 use them)
IN_PLACE_BYTES = 8 << 20  # from this size on a tensor is collapsed where it is, not copied
SMALLEST = 64 << 10  # smaller tensors (biases, norms) are left where they are
THP = Path("/sys/kernel/mm/transparent_hugepage")
# The mappings `_move` made, by first address, while a tensor still views them: a later call leaves them as they are.
_AREAS: weakref.WeakValueDictionary[int, mmap.mmap] = weakref.WeakValueDictionary()


@dataclass
class HugePages:
    """What `on_huge_pages` did: bytes of tensors collapsed in place and bytes copied onto huge pages, the bytes of
    that memory now on huge pages (`huge_bytes`), and why nothing (or not everything) was done."""

    collapsed: int = 0
    moved: int = 0
    resident: int = 0
    why_not: str | None = None

    def __str__(self) -> str:
        if self.why_not and not self.resident:
            return f"no huge pages ({self.why_not})"
        return f"{self.resident / 2**20:,.0f} MiB on huge pages" + (f" ({self.why_not})" if self.why_not else "")


def why_not() -> str | None:
    """Why this process cannot have its weights on huge pages, or None where it can."""
    if os.environ.get("AIAYN_HUGE_PAGES", "1") == "0":
        return "AIAYN_HUGE_PAGES=0"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return "only on Linux, x86-64 or AArch64"
    if not hasattr(libc(), "madvise"):
        return "no madvise in the C library"
    if mmap.PAGESIZE != 4096:  # 16 or 64 KiB pages (some AArch64 kernels): a huge page of 32 or 512 MiB
        return f"pages of {mmap.PAGESIZE // 1024} KiB: huge pages there would hold far more than the weights"
    try:
        if "THP_enabled:\t0" in Path("/proc/self/status").read_text():
            return "transparent huge pages are off for this process (prctl PR_SET_THP_DISABLE)"
        if "[never]" in (THP / "enabled").read_text():
            return "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled: never)"
        size = pmd_size()
        per_size = THP / f"hugepages-{size // 1024}kB" / "enabled"  # Linux 6.8+: a setting for each size too
        if per_size.is_file() and "[never]" in per_size.read_text():
            return f"transparent huge pages are off ({per_size}: never)"
    except OSError:
        return "no transparent huge pages (/sys/kernel/mm/transparent_hugepage)"
    return None


@functools.lru_cache(maxsize=1)
def pmd_size() -> int:
    """The size of a huge page: 2 MiB on x86-64 (and AArch64 with 4 KiB pages)."""
    try:
        return int((THP / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


def _advise(address: int, nbytes: int, advice: int, huge: int) -> bool:
    """madvise over the huge-page-aligned part of [address, address + nbytes); whether it took."""
    first = -(-address // huge) * huge
    last = (address + nbytes) // huge * huge
    return last > first and libc().madvise(first, last - first, advice) == 0


@torch.no_grad()
def on_huge_pages(model: nn.Module) -> HugePages:
    """The model's weights on huge pages, in place, as this module's docstring says; what was done. Never raises:
    it is a speed measure, and whatever goes wrong (no memory for the new mapping, no /proc) leaves the model as it
    is, or with the parameters moved so far, each complete, and says why."""
    why = why_not()
    if why is not None:
        return HugePages(why_not=why)
    done, ranges = HugePages(), []
    try:
        _place(model, done, ranges)
    except Exception as err:  # optional: decoding goes on with the weights where they are
        done.why_not = f"stopped: {type(err).__name__}: {err}"
    done.resident = huge_bytes(ranges)
    return done


def _place(model: nn.Module, done: HugePages, ranges: list[tuple[int, int]]) -> None:
    """The work of `on_huge_pages`, counted in done; the address ranges now on huge pages go into ranges."""
    huge = pmd_size()
    owners: dict[int, dict[int, Tensor]] = {}  # storage address -> the distinct tensors on it, by id
    for t in _tensors(model):
        if t.device.type == "cpu" and t.layout == torch.strided:
            owners.setdefault(t.untyped_storage().data_ptr(), {})[id(t)] = t
    small, files = [], _file_mappings()
    for address, on_it in owners.items():
        t, *others = on_it.values()
        nbytes = t.untyped_storage().nbytes()
        if _inside(address, files) or address in _AREAS:
            continue  # a view of a mapped file (`memory.MappedReads`, before `detach`), or already moved by a call before
        if nbytes >= IN_PLACE_BYTES:
            _advise(address, nbytes, MADV_HUGEPAGE, huge)  # khugepaged's work, where MADV_COLLAPSE is unknown
            if _advise(address, nbytes, MADV_COLLAPSE, huge):
                done.collapsed += nbytes
                ranges.append((address, address + nbytes))
        elif nbytes >= SMALLEST and not others and isinstance(t, nn.Parameter) and _whole(t) and _alone(t):
            small.append(t)  # a parameter alone on its storage is copied; a buffer, a view or a shared storage stays
    if small:
        done.moved, area = _move(small, huge)
        ranges.append(area)


def _alone(t: Tensor) -> bool:
    """Whether no other tensor anywhere (a view the caller keeps, say) holds t's memory: moving t would leave that
    one on the old memory, a second copy. Asked of PyTorch's storage use count where it tells (a private API:
    t itself and the storage object asked about make 2); elsewhere only the model's own tensors are known."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return True
    try:
        return count(t.untyped_storage()._cdata) <= 2
    except Exception:
        return False


def _inside(address: int, ranges: list[tuple[int, int]]) -> bool:
    """Whether address lies in one of ranges (sorted, not overlapping)."""
    i = bisect.bisect_right(ranges, (address, math.inf)) - 1
    return i >= 0 and ranges[i][0] <= address < ranges[i][1]


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of files (/proc/self/maps, in address order), left alone."""
    return [(m.start, m.end) for m in mappings() if m.inode != "0"]  # an inode: a file ([heap] and anonymous have none)


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


def _move(params: list[nn.Parameter], huge: int) -> tuple[int, tuple[int, int]]:
    """params copied into one private anonymous mapping marked MADV_HUGEPAGE before it is written, each
    parameter pointed at its copy; returns the bytes moved and the mapping's address range. The mapping lives as
    long as a tensor views it."""
    align = 64  # a cache line: every copy starts on one
    sizes = [-(-p.numel() * p.element_size() // align) * align for p in params]
    area = mmap.mmap(-1, sum(sizes) + huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = torch.frombuffer(area, dtype=torch.uint8)  # (bytes,), holds the mapping
    _AREAS[base.untyped_storage().data_ptr()] = area
    offset = -base.data_ptr() % huge  # the first copy starts a huge page
    _advise(base.data_ptr(), base.numel(), MADV_HUGEPAGE, huge)
    moved = 0
    for p, size in zip(params, sizes):
        nbytes = p.numel() * p.element_size()
        with torch.inference_mode(p.is_inference()):  # the copy as p was made: an inference tensor or not
            copy = base[offset : offset + nbytes].view(p.dtype).as_strided(p.shape, p.stride())  # p's layout
            copy.copy_(p.data)
            p.data = copy  # the old memory goes with the last reference to it
        trim_heap()  # and freed heap blocks back to the system after each copy: peak memory no higher than before
        offset += size
        moved += nbytes
    _advise(base.data_ptr(), base.numel(), MADV_COLLAPSE, huge)  # where a fault could not have a huge page at once
    return moved, (base.data_ptr(), base.data_ptr() + base.numel())


def huge_bytes(ranges: list[tuple[int, int]]) -> int:
    """The bytes on huge pages in the mappings inside ranges (/proc/self/smaps; madvise split them at the ranges'
    2 MiB boundaries, so those mappings are the weights' own), 0 if unknown."""
    try:
        return sum(
            m.kib.get("AnonHugePages", 0) * 1024
            for m in mappings(details=True)
            if any(lo <= m.start and m.end <= hi for lo, hi in ranges)
        )
    except (OSError, ValueError, IndexError):
        return 0
