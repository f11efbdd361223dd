"""The training step made for this CPU: the same function as the paper's step, computed faster.

`training_step` returns what the training loop asks of a step: a context for the forward pass and the loss of
its output. Here the context picks eq. (1)'s kernel by the batch's length (train_attention), runs the float32
products on the run's backend (train_gemm) and draws dropout masks from 64-bit words (dropout), under autocast
where the run asks for it; the loss is the projection fused with §5.4's label-smoothed cross-entropy over a kept
table (fused_loss). `aiayn.train.step.TrainingStep` is the plain step it stands in for.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from ..config import ModelConfig
from ..model import Transformer
from . import train_attention, train_gemm
from .dropout import fast_dropout
from .fused_loss import KeptTable, projected_smoothed_nll


class CpuTrainingStep:
    def __init__(self, attention: str, device: torch.device, dtype: torch.dtype | None, gemm: str):
        train_attention.attention_kernel(attention, device)  # a bad name fails here, before the first step
        self.attention, self.device, self.dtype, self.gemm = attention, device, dtype, gemm
        self.kept = KeptTable()  # the logits table of every step, and then its gradient

    def forward(self, length: int) -> contextlib.ExitStack:
        """The context of a forward pass over a batch whose longer side has `length` positions."""
        kernel = train_attention.attention_kernel(self.attention, self.device, length)
        stack = contextlib.ExitStack()
        for context in (
            torch.autocast(self.device.type, dtype=self.dtype) if self.dtype is not None else contextlib.nullcontext(),
            train_attention.attention(kernel),
            train_gemm.products(self.gemm),
            fast_dropout(),
        ):
            stack.enter_context(context)
        return stack

    def loss(self, hidden: Tensor, model: Transformer, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor, int]:
        """label_smoothed_nll(model.project(hidden), target): hidden (B, T, D) the decoder's output."""
        return projected_smoothed_nll(
            hidden,
            model.output_proj.matrix,
            model.logits_bias,
            target,
            epsilon,
            model.config.pad_id,
            self.kept,
            self.dtype,
            self.gemm,
        )


def training_step(
    config: ModelConfig,
    attention: str = "auto",
    gemm: str = "auto",
    device: torch.device = torch.device("cpu"),
    dtype: torch.dtype | None = None,
    kept_gemm: str = "",
    compiled: bool = False,
) -> CpuTrainingStep:
    """The step for a model of `config` on `device`: eq. (1)'s kernel "auto", "fused" or "math"; the float32
    products' backend "auto" (measured here, or `kept_gemm`, the one a resumed run's checkpoints recorded),
    "mkl" or "onednn"; autocast's dtype (None: float32, as in the paper)."""
    chosen = train_gemm.choose(gemm, config, device, dtype, kept_gemm, compiled)
    return CpuTrainingStep(attention, device, dtype, chosen)
