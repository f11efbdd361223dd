"""What makes the Transformer fast and small on a CPU, apart from the paper's logic.

Nothing here changes what the model computes: each piece replaces a module or a product with one that
computes the same function (to rounding) faster or in less memory on this machine's CPU. The rest of
aiayn reaches it through a few calls:

    step_model(model)        the step model decoding drives on this CPU (aiayn.decode.step's interface)
    training_step(config)    the training step's forward context and fused loss (aiayn.train.step's interface)
    layout.for_decoding      a model's weights laid out for decoding (Translator.load calls it)
    backend.choose           which library runs the float32 products, measured on the model's shapes

The search (aiayn.decode) and the training loop import nothing from here.
"""

from .onednn_caches import ONEDNN_CACHE_ENTRIES, set_caches

set_caches(ONEDNN_CACHE_ENTRIES)  # oneDNN's kernel caches bounded before its first product (onednn_caches.py)


def step_model(model):
    """model (a Transformer) behind the step interface, with this CPU's faster step (`step.CpuStep`)."""
    from .step import CpuStep

    return CpuStep(model)


def training_step(config, attention="auto", gemm="auto", device=None, dtype=None, kept_gemm="", compiled=False):
    """The training step for a model of `config` on this CPU (`training.CpuTrainingStep`): use it in your own loop
    as `aiayn train` does (docs/training.md, "Your own training loop")."""
    import torch

    from .training import training_step as make

    return make(config, attention, gemm, device or torch.device("cpu"), dtype, kept_gemm, compiled)
