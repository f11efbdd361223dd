"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from .onednn_caches import ONEDNN_CACHE_ENTRIES, set_caches

set_caches(ONEDNN_CACHE_ENTRIES)  # oneDNN's kernel caches bounded before it first runs (onednn_caches.py)

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
