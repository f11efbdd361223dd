"""aiayn: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

from .config import ModelConfig
from .model import Transformer

__all__ = ["ModelConfig", "Transformer"]
__version__ = "0.1.0"
