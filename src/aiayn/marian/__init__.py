"""Released Transformer models (SPEC M6): Hugging Face Marian / opus-mt directories in and out, CTranslate2.

`load_marian(dir)` runs a Marian checkpoint in aiayn's own Transformer; `save_marian` writes one that
`transformers` loads; `convert` moves whole directories between aiayn, Marian and CTranslate2.
"""

from .convert import (
    aiayn_to_marian,
    detect_format,
    load_any,
    load_tokenizer,
    marian_to_aiayn,
    save_tokenizer,
    to_ctranslate2,
)
from .export import halves_permutation, permute_residual, save_marian
from .load import is_marian_model, load_marian, model_config_from_marian, read_marian_config
from .tokenizer import MarianTokenizer

__all__ = [
    "MarianTokenizer",
    "aiayn_to_marian",
    "detect_format",
    "halves_permutation",
    "is_marian_model",
    "load_any",
    "load_marian",
    "load_tokenizer",
    "marian_to_aiayn",
    "model_config_from_marian",
    "permute_residual",
    "read_marian_config",
    "save_marian",
    "save_tokenizer",
    "to_ctranslate2",
]
