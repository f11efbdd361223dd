"""What makes the Transformer fast and small on a CPU, apart from the paper's logic.

Nothing here changes what the model computes: each piece replaces a module or a product with one that
computes the same function (to rounding) faster or in less memory on this machine's CPU. The rest of
aiayn reaches it through `Translator.load` (decoding) and the training loop's step contexts.
"""

from .onednn_caches import ONEDNN_CACHE_ENTRIES, set_caches

set_caches(ONEDNN_CACHE_ENTRIES)  # oneDNN's kernel caches bounded before its first product (onednn_caches.py)
