"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from .config import DecodeConfig, ModelConfig
from .model import Transformer

__all__ = ["DecodeConfig", "ModelConfig", "Transformer"]
__version__ = "0.1.0"
