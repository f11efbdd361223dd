"""What makes the Transformer fast and small on a CPU, apart from the paper's logic.

Nothing here changes what the model computes: each piece replaces a module or a product with one that
computes the same function (to rounding) faster or in less memory on this machine's CPU. The rest of
aiayn reaches it through a few calls:

    step_model(model)        the step model decoding drives on this CPU (`step.CpuStep`; aiayn.decode.step's interface)
    training_step(config)    the training step's forward context and fused loss (`training.CpuTrainingStep`;
                             aiayn.train.step's interface; docs/training.md, "Your own training loop")
    layout.for_decoding      a model's weights laid out for decoding (Translator.load calls it)
    backend.choose           which library runs the float32 products, measured on the model's shapes

The search (aiayn.decode) and the training loop import nothing from here.
"""

from .onednn_caches import ONEDNN_CACHE_ENTRIES, set_caches

set_caches(ONEDNN_CACHE_ENTRIES)  # oneDNN's kernel caches bounded before its first product (onednn_caches.py)
from .step import CpuStep as step_model  # noqa: E402  (the caches sized first)
from .training import training_step  # noqa: E402

__all__ = ["ONEDNN_CACHE_ENTRIES", "set_caches", "step_model", "training_step"]
