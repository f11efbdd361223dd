"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

import os

# oneDNN, which runs PyTorch's bf16 products on a CPU and aiayn's float32 ones where it is the faster
# (decode/backend.py, train/gemm.py), compiles a kernel for each product shape and keeps up to 1,024 of
# them, with their buffers, in each of two caches: oneDNN's own and PyTorch's ideep (LRU_CACHE_CAPACITY).
# Batches of varying lengths meet new shapes all the time, so a process grew without need: 1.5 GB in 120
# bf16 training steps of the Multi30k model, 289 MiB translating one sentence of each length 1-128
# (docs/translation.md). 64 entries hold every shape that one batch's decoding or one training step uses
# (at 32, beam 4 at batch 32 compiled twice as often and peaked higher), at the same speed. 16 lowers the
# peaks of translation whose batches shrink as sentences end, but training then compiles more from step to
# step (docs/translation.md, "A smaller kernel cache for sentences of their own lengths"): the commands that
# only translate take 16 (`decode.backend.caches_for_translation`). Set before oneDNN first runs in the
# process, which reads them then; a value already in the environment is kept, here and by those commands.
# A process started from this one inherits the values set here: AIAYN_SET_CACHES names them, so that aiayn there
# does not take them for the user's.
ONEDNN_CACHE_ENTRIES = 64
ONEDNN_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
_inherited = os.environ.get("AIAYN_SET_CACHES", "").split(",")
CACHES_SET_BY_USER = frozenset(name for name in ONEDNN_CACHES if name in os.environ
                               and not (name in _inherited and os.environ[name] == str(ONEDNN_CACHE_ENTRIES)))
for _name in ONEDNN_CACHES:
    if _name not in CACHES_SET_BY_USER:
        os.environ[_name] = str(ONEDNN_CACHE_ENTRIES)
os.environ["AIAYN_SET_CACHES"] = ",".join(name for name in ONEDNN_CACHES if name not in CACHES_SET_BY_USER)

from .config import DecodeConfig, ModelConfig  # noqa: E402  (after the caches are set)
from .model import Transformer  # noqa: E402

__all__ = ["DecodeConfig", "ModelConfig", "Transformer", "Translator"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """`from aiayn import Translator`, imported on first use (it brings in the search and Marian code)."""
    if name == "Translator":
        from .decode.translate import Translator

        return Translator
    raise AttributeError(f"module 'aiayn' has no attribute {name!r}")
