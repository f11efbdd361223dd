"""What one training step computes (§5): a forward pass, then the label-smoothed loss (§5.4) of its output.

`TrainingStep` is the paper's step as written: the model's forward under autocast where the run asks for it,
the pre-softmax projection, `label_smoothed_nll`. `for_this_machine` gives the step the loop runs, aiayn.cpu's,
which computes the same function faster (its own attention kernel choice, float32 products on the measured
backend, faster dropout masks, the projection fused with the loss over a kept table).
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from ..model import Transformer
from ..recipe import TrainConfig
from . import precision
from .loss import label_smoothed_nll


class TrainingStep:
    gemm = "mkl"  # the float32 products' backend: PyTorch's own

    def __init__(self, device: torch.device, dtype: torch.dtype | None):
        self.device, self.dtype = device, dtype

    def forward(self, length: int) -> contextlib.AbstractContextManager:
        """The context of a forward pass over a batch whose longer side has `length` positions: autocast's."""
        return precision.autocast(self.device, self.dtype)

    def loss(self, hidden: Tensor, model: Transformer, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor, int]:
        """label_smoothed_nll of the logits of hidden (B, T, D), the decoder's output: summed loss, summed NLL,
        tokens."""
        with self.forward(0):
            logits = model.project(hidden)  # (B, T, V)
        return label_smoothed_nll(logits, target, epsilon, model.config.pad_id)


def for_this_machine(
    model: Transformer, cfg: TrainConfig, device: torch.device, dtype: torch.dtype | None, kept_gemm: str = ""
) -> TrainingStep:
    """The step the training loop runs for model under cfg: aiayn.cpu's, whose kept logits table also saves
    memory on a GPU (there its kernels and products are PyTorch's own). kept_gemm: the backend a resumed run's
    checkpoints recorded ("" for a new run)."""
    from .. import cpu

    return cpu.training_step(model.config, cfg.attention, cfg.gemm, device, dtype, kept_gemm, cfg.compile)
