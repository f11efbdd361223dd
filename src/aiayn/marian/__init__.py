"""Released Transformer models (SPEC M6): Hugging Face Marian / opus-mt directories in and out, CTranslate2.

`load_marian(dir)` runs a Marian checkpoint in aiayn's own Transformer; `save_marian` writes one that
`transformers` loads. Reading any model folder: aiayn.model_folder; converting folders: aiayn.convert.
"""

from .export import halves_permutation, permute_residual, save_marian
from .load import is_marian_model, load_marian, model_config_from_marian, read_marian_config
from .tokenizer import MarianTokenizer

__all__ = [
    "MarianTokenizer",
    "halves_permutation",
    "is_marian_model",
    "load_marian",
    "model_config_from_marian",
    "permute_residual",
    "read_marian_config",
    "save_marian",
]
