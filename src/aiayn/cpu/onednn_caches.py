"""The sizes of oneDNN's two kernel caches, set through the environment before oneDNN first runs. Not in the
paper: a memory measure (docs/studies/translation-memory.md, "oneDNN keeps at most 64 compiled products" and
"Taken for the commands that only translate").

oneDNN, which runs PyTorch's bf16 products on a CPU and aiayn's float32 ones where it is the faster
(cpu/backend.py, cpu/train_gemm.py), compiles a kernel for each product shape and keeps up to 1,024 of them, with
their buffers, in each of two caches: oneDNN's own (ONEDNN_PRIMITIVE_CACHE_CAPACITY) and PyTorch's ideep
(LRU_CACHE_CAPACITY). Batches of varying lengths meet new shapes all the time, so a process would grow without
need. Importing aiayn.cpu (what decoding and training import) sets both to `ONEDNN_CACHE_ENTRIES`: 64 hold every
shape that one batch's decoding or one training step uses, and training, which reuses a step's kernels at the next
step, needs them. The commands that only translate set 16 (`cpu.backend.caches_for_translation`): where
sentences end at their own lengths, translation's row counts change at every step and a batch reuses little of
the last one's kernels. oneDNN reads the variables when it first runs in a process, so a value set after that
changes nothing.

A value the user set is kept, as is oneDNN's own cache size under its older name (DNNL_PRIMITIVE_CACHE_CAPACITY,
which ONEDNN_PRIMITIVE_CACHE_CAPACITY would override). `AIAYN_SET_CACHES` records the values aiayn set
(NAME=value, comma-separated), so that a process started from this one, which inherits them, does not take them
for the user's, and so that a value a program sets after importing aiayn.cpu is told from aiayn's own. A user's
value equal to the one aiayn
recorded for that variable cannot be told apart, and counts as aiayn's.
"""

from __future__ import annotations

import os

ONEDNN_CACHE_ENTRIES = 64
ONEDNN_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
OLDER_NAMES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "DNNL_PRIMITIVE_CACHE_CAPACITY"}  # oneDNN still reads it
RECORD = "AIAYN_SET_CACHES"


def set_by_aiayn() -> dict[str, str]:
    """The cache variables that still hold the value aiayn (in this process or a parent) gave them: name -> value."""
    recorded = dict(item.split("=", 1) for item in os.environ.get(RECORD, "").split(",") if "=" in item)
    return {name: value for name, value in recorded.items() if name in ONEDNN_CACHES and os.environ.get(name) == value}


def set_caches(entries: int) -> list[str]:
    """Both caches at `entries` where the user did not size them; returns the variables set, and records them."""
    ours = set_by_aiayn()
    unset = [name for name in ONEDNN_CACHES if name not in os.environ and OLDER_NAMES.get(name, name) not in os.environ]
    changed = [name for name in ONEDNN_CACHES if name in ours or name in unset]
    for name in changed:
        os.environ[name] = ours[name] = str(entries)
    os.environ[RECORD] = ",".join(f"{name}={value}" for name, value in ours.items())
    return changed
