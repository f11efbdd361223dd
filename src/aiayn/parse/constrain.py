"""Tree-constrained search: a StepModel that lets the decoder write only well-formed trees.

Deviation from §6.3, an option (`aiayn parse --constrained`): the paper searches without
constraints and relies on the model. Here each hypothesis carries its open brackets and the number
of tags written, and the next token's log-probabilities are set to -inf where it would break the
tree: a tag outside the root bracket; a closing bracket other than the innermost open one's, or
right after it opened, or one that would close the root before every word has a tag; a tag or an
opening bracket once every word has its tag; </s> before the tree is complete. Any search (beam,
greedy) runs on it unchanged.

Dimension legend: N rows (hypotheses), V target symbols, D the deepest nesting allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..decode.step import StepModel
from .linearize import is_close, is_open

MAX_DEPTH = 128


@dataclass
class TreeState:
    """The inner model's cache and, per row, how far its tree has got."""

    cache: Any
    depth: Tensor  # (N,) brackets open
    tags: Tensor  # (N,) tags written
    words: Tensor  # (N,) words of the row's sentence
    stack: Tensor  # (N, D) the closing symbol each open bracket expects, innermost at depth - 1
    after_open: Tensor  # (N,) bool: the last token opened a bracket

    def index_select(self, index: Tensor, sentences: Tensor | None = None) -> TreeState:
        return TreeState(self.cache.index_select(index, sentences), self.depth[index], self.tags[index],
                         self.words[index], self.stack[index], self.after_open[index])


class TreeConstrainedStep:
    """inner (a StepModel over ParseTokenizer's symbols) with the tree rules applied to each step."""

    def __init__(self, inner: StepModel, symbols: list[str], words: Tensor):
        self.inner, self.words = inner, words  # words (B,): each sentence's word count
        self.bos_id, self.eos_id, self.pad_id = inner.bos_id, inner.eos_id, inner.pad_id
        self.banned, self.max_len = inner.banned, inner.max_len
        ids = {s: i for i, s in enumerate(symbols)}
        self.is_open = torch.tensor([is_open(s) for s in symbols])  # (V,)
        self.is_close = torch.tensor([is_close(s) for s in symbols])
        special = {inner.bos_id, inner.eos_id, inner.pad_id} | {i for i, s in enumerate(symbols) if s.startswith("<")}
        self.is_tag = ~(self.is_open | self.is_close) & torch.tensor([i not in special for i in range(len(symbols))])
        self.close_of = torch.tensor([ids.get(")" + s[1:], -1) if is_open(s) else -1 for s in symbols])  # (V,)

    def start(self, src: Tensor) -> TreeState:
        B, device = src.size(0), src.device
        self._to(device)
        zeros = torch.zeros(B, dtype=torch.long, device=device)
        return TreeState(self.inner.start(src), zeros, zeros.clone(), self.words.to(device),
                         torch.zeros(B, MAX_DEPTH, dtype=torch.long, device=device),
                         torch.zeros(B, dtype=torch.bool, device=device))

    def _to(self, device: torch.device) -> None:
        for name in ("is_open", "is_close", "is_tag", "close_of"):
            setattr(self, name, getattr(self, name).to(device))

    def step(self, tokens: Tensor, state: TreeState) -> tuple[Tensor, TreeState]:
        """tokens (N, 1): the last token of each row -> masked log-probabilities (N, V), the next state."""
        token = tokens[:, 0]
        opened, closed = self.is_open[token], self.is_close[token]  # (N,) each; </s> and <s> are neither
        rows = opened.nonzero()[:, 0]
        state.stack[rows, state.depth[rows].clamp(max=MAX_DEPTH - 1)] = self.close_of[token[rows]]
        depth = state.depth + opened.long() - closed.long()
        tags = state.tags + self.is_tag[token].long()
        log_probs, cache = self.inner.step(tokens, state.cache)  # the inner model's buffer, masked in place
        nxt = TreeState(cache, depth, tags, state.words, state.stack, opened)
        log_probs.masked_fill_(~self.allowed(nxt), -math.inf)
        return log_probs, nxt

    def allowed(self, s: TreeState) -> Tensor:
        """(N, V) bool: the tokens each row may write next."""
        N = s.depth.size(0)
        done = s.tags >= s.words  # (N,) every word has its tag
        allowed = (self.is_tag[None, :] & (s.depth > 0)[:, None]) | self.is_open[None, :]  # (N, V): one root
        allowed &= ~done[:, None]
        allowed[:, self.is_open] &= (s.depth < MAX_DEPTH - 1)[:, None]
        may_close = (s.depth > 0) & ~s.after_open & ((s.depth > 1) | done)  # the root closes last
        top = s.stack[torch.arange(N, device=s.depth.device), (s.depth - 1).clamp(min=0)]  # (N,)
        rows = (may_close & (top >= 0)).nonzero()[:, 0]
        allowed[rows, top[rows]] = True
        allowed[:, self.eos_id] = done & (s.depth == 0)
        return allowed
