"""The one narrow interface search reaches a model through: tokens and cache in, log-probs and cache out.

Greedy search, beam search and sampling see a model only as a `StepModel`: `start(src)` encodes
the source once and returns the cache, `step(tokens, cache)` scores the next token. A cache is
anything with `index_select(rows, sentences)`, which reorders beams and drops finished sentences in
one go. A cache passed to `step` or `index_select` is used up (the Transformer's raises if used
again, see `state.py`), and the log-probabilities a step returns are valid until the next step.
Tests drive the same searches with hand-written probability tables through this interface.

Dimension legend: B sentences, N = B x beams rows, S source length, V target vocabulary.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model import Transformer
from ..model.attention import KeyValue
from ..model.masks import padding_mask
from .state import DecoderState, KVBuffer, RowTable


class Cache(Protocol):
    def index_select(self, index: Tensor, sentences: Tensor | None = None) -> Any:
        """Rows index (hypotheses) kept, in order; sentences kept, in order (None: every one stays)."""


class StepModel(Protocol):
    bos_id: int  # the token every target starts from
    eos_id: int
    pad_id: int  # padding of source batches
    banned: tuple[int, ...]  # tokens never generated (pad, the start token)
    max_len: int | None  # longest target the model can take (its position table), None = no limit

    def start(self, src: Tensor) -> Cache: ...

    def step(self, tokens: Tensor, cache: Any) -> tuple[Tensor, Any]: ...


class TransformerStep:
    """A `Transformer` behind the step interface, decoding incrementally (cached keys and values, §3.2.3).

    This is the paper's path: every step runs the model's own `decode_step`. A step model made for a
    particular machine (`aiayn.cpu.step_model`) subclasses it and replaces `logits` and `uses_row_table`
    with ones that compute the same numbers faster.
    """

    def __init__(self, model: Transformer):
        self.model = model
        cfg = model.config
        self.bos_id, self.eos_id, self.pad_id = cfg.bos_id, cfg.eos_id, cfg.pad_id
        self.banned = tuple(sorted({cfg.pad_id, cfg.bos_id}))
        self.max_len = cfg.max_len

    def start(self, src: Tensor, capacity: int = 64) -> DecoderState:
        """Run the encoder once: src (B, S) -> the decoder's state before any target token.

        The encoder keys/values of every decoder layer are computed here, once (§3.2.3); the
        self-attention caches start with room for `capacity` positions and grow as needed.
        """
        memory, src_mask = self.encode_by_length(src)
        memory_kv = self.model.decoder.memory_kv(memory)
        for i in range(len(memory_kv)):  # as projected, (B, S, h, d) seen transposed: every step would read them
            memory_kv[i] = KeyValue(*(t.contiguous() for t in memory_kv[i]))  # strided
        shape = self.model.config.decoder
        capacity = min(capacity, self.max_len)
        table = RowTable(capacity, src.size(0), memory.device) if self.uses_row_table(memory) else None
        caches = [
            KVBuffer.empty(src.size(0), shape.heads, shape.d_k, shape.d_v, capacity, memory, table)
            for _ in range(shape.layers)
        ]
        return DecoderState(src_mask, memory_kv, caches)

    def uses_row_table(self, memory: Tensor) -> bool:
        """Whether the caches reorder hypotheses through a `RowTable` rather than by copying rows: only for
        an attention that reads the caches through it (none here)."""
        return False

    def encode_by_length(self, src: Tensor, groups: int = 4) -> tuple[Tensor, Tensor]:
        """model.encode(src), the sentences encoded in groups of similar length, each cut to its longest.

        A batch in no particular order pads every sentence to the longest, and the encoder's products
        spend much of their time on the padding (docs/studies/translation-speed.md). Padded positions, which the
        decoder never reads (they are masked), may hold zeros.
        """
        lengths = (src != self.pad_id).sum(dim=1)  # (B,)
        B, S = src.shape
        if B < 2 * groups or int(lengths.min()) * 5 >= S * 4:  # small batch or little padding: as it is
            return self.model.encode(src)
        order = lengths.argsort(descending=True)
        memory = None
        for rows in order.chunk(groups):
            length = max(1, int(lengths[rows[0]]))  # at least one position, even for all-padding rows
            part, _ = self.model.encode(src[rows, :length])  # (b, length, D)
            if memory is None:
                memory = part.new_zeros(B, S, part.size(-1))
            memory[rows, :length] = part
        return memory, padding_mask(src, self.pad_id)

    def step(self, tokens: Tensor, cache: DecoderState) -> tuple[Tensor, DecoderState]:
        """tokens (N, 1) -> log-probabilities (N, V) of the next token, and the extended state.

        The state passed in is used up. The log-probabilities are computed in place over the logits, which
        may be a buffer the next step overwrites (aiayn.cpu's projection).
        """
        state = cache.take()
        logits = self.logits(tokens, state)  # (N, V)
        if logits.dtype != torch.float32:  # half precision: float32 log-probabilities, a new tensor
            return logits.float().log_softmax(dim=-1), state
        return torch.log_softmax(logits, dim=-1, out=logits), state

    def logits(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """The next token's logits (N, V) for tokens (N, 1), the caches grown by one position."""
        return self.model.decode_step(tokens, state.memory_kv, state.src_mask, state.caches)


class Prefix:
    """An uncached state: the source memory and the whole target prefix, recomputed every step."""

    def __init__(self, memory: Tensor, src_mask: Tensor, tokens: Tensor):
        self.memory, self.src_mask, self.tokens = memory, src_mask, tokens  # (N, S, D), (N,1,1,S), (N, t)

    def index_select(self, index: Tensor, sentences: Tensor | None = None) -> Prefix:
        """The memory is held per hypothesis here, so it follows index."""
        return Prefix(self.memory[index], self.src_mask[index], self.tokens[index])


class UncachedTransformerStep(TransformerStep):
    """The same model without incremental decoding: each step runs the decoder over the full prefix.

    Slow (quadratic) and only for checking that the cache changes nothing.
    """

    def start(self, src: Tensor) -> Prefix:
        memory, src_mask = self.model.encode(src)
        return Prefix(memory, src_mask, src.new_zeros(src.size(0), 0))

    def step(self, tokens: Tensor, cache: Prefix) -> tuple[Tensor, Prefix]:
        prefix = torch.cat([cache.tokens, tokens], dim=1)  # (N, t)
        logits = self.model.decode(prefix, cache.memory, cache.src_mask)[:, -1]  # (N, V)
        return logits.float().log_softmax(dim=-1), Prefix(cache.memory, cache.src_mask, prefix)


def as_step_model(model: Transformer | StepModel) -> StepModel:
    return TransformerStep(model) if isinstance(model, Transformer) else model


def force_eos(log_probs: Tensor, at_limit: Tensor, eos_id: int) -> None:
    """Rows at their last allowed position may only write </s>, at log-probability 0 (in place).

    log_probs (N, V), at_limit (N,). This is Hugging Face's forced_eos_token_id, which Marian
    checkpoints set: without it a hypothesis that reaches the cap simply ends there.
    """
    if at_limit.any():
        log_probs[at_limit] = -math.inf
        log_probs[at_limit, eos_id] = 0.0


def ban(log_probs: Tensor, model: StepModel) -> None:
    """The tokens the model never generates (padding, the start token) get log-probability -inf, in place."""
    for token in model.banned:
        log_probs[:, token] = -math.inf


def search_limits(model: StepModel, src: Tensor, config: DecodeConfig) -> Tensor:
    """Longest output per sentence of src (B, S) for a search: output_limits with config's extra_len,
    capped by config.max_len and by the model's position table: (B,)."""
    caps = [c for c in (config.max_len, model.max_len) if c is not None]
    return output_limits(src, model.pad_id, config.extra_len, min(caps) if caps else None)


def output_limits(src: Tensor, pad_id: int, extra_len: int, max_len: int | None) -> Tensor:
    """Longest output per sentence, </s> included: source length + extra_len (§6.1), capped by max_len: (B,)."""
    limits = (src != pad_id).sum(dim=1) + extra_len
    return limits.clamp(max=max_len) if max_len is not None else limits


def drop_ended(ended: Tensor, alive: Tensor, tokens: Tensor, cache: Any) -> tuple[Tensor, Tensor, Any] | None:
    """Greedy search and sampling: the rows still decoding once those that ended leave the batch.

    ended (B',) bool; alive (B',) each row's sentence; tokens (B', 1) each row's last token.
    None when every row has ended.
    """
    keep = (~ended).nonzero()[:, 0]
    if keep.numel() == 0:
        return None
    return alive[keep], tokens[keep], cache.index_select(keep, keep)  # one row per sentence
