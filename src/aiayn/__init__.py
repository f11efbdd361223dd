"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from .config import DecodeConfig, ModelConfig
from .model import Transformer
from .version import __version__

__all__ = ["DecodeConfig", "ModelConfig", "Transformer", "Translator", "__version__"]


def __getattr__(name: str):
    """`from aiayn import Translator`, imported on first use (it brings in the search and Marian code)."""
    if name == "Translator":
        from .translator import Translator

        return Translator
    raise AttributeError(f"module 'aiayn' has no attribute {name!r}")
