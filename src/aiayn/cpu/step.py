"""The decoding step made for this CPU: `TransformerStep` with the same numbers computed faster.

Three things differ from the paper's path (`aiayn.decode.step.TransformerStep`), none in what is computed:
- where the decoder is made of the model's own modules, a step runs `layer_step.decode_step`, the same maths
  on (N, D) rows without training's wrappers;
- where aiayn's attention kernels are built (`attend.c`) and the model's attention modules are its own, the
  caches reorder beams through a row table and the self-attention reads through it, so no cache is copied;
- the C heap gives back what the last batch freed before each batch and again after its encoder, so that
  batches of other sizes do not leave the resident memory higher each time (glibc keeps freed blocks);
and greedy search picks each row's best token with gemv.c's argmax where it is built.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..decode.beam import top_k
from ..decode.state import DecoderState
from ..decode.step import TransformerStep
from ..model import Transformer
from . import attend, gemv, layer_step
from .memory import trim_heap


class CpuStep(TransformerStep):
    def __init__(self, model: Transformer):
        super().__init__(model)
        self.uses_layer_step = layer_step.fits(model)  # a step without training's wrappers, where it computes the same

    def start(self, src: Tensor, capacity: int = 64) -> DecoderState:
        trim_heap()
        state = super().start(src, capacity)
        trim_heap()  # what the encoder's activations freed, which the steps' small buffers would not reuse
        return state

    def uses_row_table(self, memory: Tensor) -> bool:
        """Whether the steps' attention runs on aiayn's own kernels (`attend.py`): self-attention reading the caches
        through a row table, so that reordering beams copies no cache, and encoder-decoder attention. That needs
        the lean step (`layer_step`), the model's own attention modules as they are (checked at every `start`:
        a module swapped in later runs), float32 on the CPU, and the kernels built."""
        if memory.dtype != torch.float32 or memory.device.type != "cpu" or not self.uses_layer_step:
            return False
        modules = [
            m for layer in self.model.decoder.layers for m in (layer.self_attn.attention, layer.cross_attn.attention)
        ]
        return all(attend.supports(m) for m in modules) and attend.kernel() is not None

    def logits(self, tokens: Tensor, state: DecoderState) -> Tensor:
        if self.uses_layer_step and layer_step.applies(
            self.model, tokens
        ):  # the same maths without training's wrappers
            return layer_step.decode_step(self.model, tokens, state.memory_kv, state.src_mask, state.caches)
        return super().logits(tokens, state)

    @staticmethod
    def argmax(log_probs: Tensor) -> tuple[Tensor, Tensor]:
        """(B', V) -> each row's best log-probability and token, (B', 1) each: the first among equals."""
        picked = gemv.argmax(log_probs)
        return picked if picked is not None else top_k(log_probs, 1)
