"""Tree-constrained search: a StepModel that lets the decoder write only well-formed trees.

Deviation from §6.3, an option (`aiayn parse --constrained`): the paper searches without
constraints and relies on the model. Here each hypothesis carries its open brackets and the number
of tags written, and the next token's log-probabilities are set to -inf where it would break the
tree: a tag outside the root bracket; a closing bracket other than the innermost open one's, or
right after it opened, or one that would close the root before every word has a tag; a tag or an
opening bracket once every word has its tag; </s> before the tree is complete. Any search (beam,
greedy) runs on it unchanged.

The training trees bound the shape (`TreeShape`, kept with the target vocabulary): no more
opening brackets in a row, and no deeper nesting, than any training tree has (6 and 28 in the
sample's training files). Without that bound a model that has lost its place in the sentence
opens brackets over and over ("(NP (NP (NP ...") until the length limit.

A length budget keeps every hypothesis finishable: given the search's limit (input length + 300,
§6.3), an opening bracket is allowed only while the symbols left could still tag the remaining
words, close every open bracket and end with </s>. So a hypothesis that strays ends as a tree at the
limit instead of being cut there (the root is always allowed, so a limit too short for any tree cuts).

The words themselves anchor the tags (`word_rules`): the k-th tag written is word k's, so where the
treebank fixes a word's tag (punctuation, `FIXED_TAGS`) only that tag may come next, and a word with
a letter or a digit may not get a punctuation tag. These are the rules `repair` applies afterwards
(it retags such words); inside the search they also keep the tags in step with the words, as a
comma or a full stop marks where the decoder is in the sentence.

Dimension legend: N rows (hypotheses), B sentences, W words, V target symbols, D the deepest nesting allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..decode.step import StepModel, search_limits
from .linearize import FIXED_TAGS, PUNCTUATION, is_close, is_open

MAX_DEPTH = 128
FREE, NO_PUNCTUATION = -2, -1  # word rules besides a tag's id: any tag; any tag but punctuation's


def word_rules(sentences: list[list[str]], symbols: list[str]) -> Tensor:
    """(B, W) long: for word k of sentence b, the id of the tag the treebank fixes for it (FIXED_TAGS),
    NO_PUNCTUATION for a word with a letter or digit (EVALB would delete it under a punctuation tag),
    else FREE; FREE past a sentence's end."""
    ids = {s: i for i, s in enumerate(symbols)}
    rules = torch.full((len(sentences), max((len(w) for w in sentences), default=0) or 1), FREE, dtype=torch.long)
    for b, words in enumerate(sentences):
        for k, word in enumerate(words):
            fixed = FIXED_TAGS.get(word)
            if fixed is not None and fixed in ids:
                rules[b, k] = ids[fixed]
            elif fixed is None and any(c.isalnum() for c in word):
                rules[b, k] = NO_PUNCTUATION
    return rules


@dataclass
class TreeState:
    """The inner model's cache and, per row, how far its tree has got."""

    cache: Any
    depth: Tensor  # (N,) brackets open
    tags: Tensor  # (N,) tags written
    words: Tensor  # (N,) words of the row's sentence
    rules: Tensor  # (N, W) the row's sentence's word_rules
    stack: Tensor  # (N, D) the closing symbol each open bracket expects, innermost at depth - 1
    open_run: Tensor  # (N,) opening brackets written in a row just now (0: the last token opened none)
    written: Tensor  # (N,) symbols written so far
    limit: Tensor  # (N,) the most symbols the row's sentence may have, </s> included

    def index_select(self, index: Tensor, sentences: Tensor | None = None) -> TreeState:
        return TreeState(self.cache.index_select(index, sentences), self.depth[index], self.tags[index],
                         self.words[index], self.rules[index], self.stack[index], self.open_run[index],
                         self.written[index], self.limit[index])


@dataclass(frozen=True)
class TreeShape:
    """The most opening brackets in a row, and the deepest nesting, of the training trees."""

    open_run: int = MAX_DEPTH
    depth: int = MAX_DEPTH - 1

    @classmethod
    def of(cls, sequences: list[list[str]]) -> TreeShape:
        open_run = depth = 0
        for sequence in sequences:
            run = d = 0
            for symbol in sequence:
                run = run + 1 if is_open(symbol) else 0
                d += is_open(symbol) - is_close(symbol)
                open_run, depth = max(open_run, run), max(depth, d)
        return cls(min(max(open_run, 1), MAX_DEPTH), min(max(depth, 1), MAX_DEPTH - 1))


class TreeConstrainedStep:
    """inner (a StepModel over ParseTokenizer's symbols) with the tree rules applied to each step.

    config: the search's settings, for its length limits (the budget); None for no budget.
    shape: the training trees' bounds; the default bounds nothing but MAX_DEPTH."""

    def __init__(self, inner: StepModel, symbols: list[str], words: Tensor, rules: Tensor | None = None,
                 config: DecodeConfig | None = None, shape: TreeShape = TreeShape()):
        self.inner, self.words, self.config, self.shape = inner, words, config, shape  # words (B,): word counts
        self.rules = torch.full((len(words), 1), FREE, dtype=torch.long) if rules is None else rules  # (B, W)
        self.bos_id, self.eos_id, self.pad_id = inner.bos_id, inner.eos_id, inner.pad_id
        self.banned, self.max_len = inner.banned, inner.max_len
        ids = {s: i for i, s in enumerate(symbols)}
        self.is_open = torch.tensor([is_open(s) for s in symbols])  # (V,)
        self.is_close = torch.tensor([is_close(s) for s in symbols])
        special = {inner.bos_id, inner.eos_id, inner.pad_id} | {i for i, s in enumerate(symbols) if s.startswith("<")}
        self.is_tag = ~(self.is_open | self.is_close) & torch.tensor([i not in special for i in range(len(symbols))])
        self.close_of = torch.tensor([ids.get(")" + s[1:], -1) if is_open(s) else -1 for s in symbols])  # (V,)
        self.is_punctuation = self.is_tag & torch.tensor([s in PUNCTUATION for s in symbols])

    def start(self, src: Tensor) -> TreeState:
        B, device = src.size(0), src.device
        self._to(device)
        zeros = torch.zeros(B, dtype=torch.long, device=device)
        limit = (search_limits(self, src, self.config) if self.config is not None
                 else torch.full((B,), torch.iinfo(torch.long).max // 2, device=device))
        return TreeState(self.inner.start(src), zeros, zeros.clone(), self.words.to(device), self.rules.to(device),
                         torch.zeros(B, MAX_DEPTH, dtype=torch.long, device=device),
                         zeros.clone(), zeros.clone(), limit.to(device))

    def _to(self, device: torch.device) -> None:
        for name in ("is_open", "is_close", "is_tag", "close_of", "is_punctuation"):
            setattr(self, name, getattr(self, name).to(device))

    def step(self, tokens: Tensor, state: TreeState) -> tuple[Tensor, TreeState]:
        """tokens (N, 1): the last token of each row -> masked log-probabilities (N, V), the next state."""
        token = tokens[:, 0]
        opened, closed = self.is_open[token], self.is_close[token]  # (N,) each; </s> and <s> are neither
        rows = opened.nonzero()[:, 0]
        state.stack[rows, state.depth[rows].clamp(max=MAX_DEPTH - 1)] = self.close_of[token[rows]]
        # A row whose every choice was masked (-inf: a beam with fewer legal candidates than slots) can
        # still be extended by the search; it never wins, and the clamp keeps its state in range.
        depth = (state.depth + opened.long() - closed.long()).clamp(0, MAX_DEPTH - 1)
        tags = state.tags + self.is_tag[token].long()
        written = state.written + (token != self.bos_id).long()
        log_probs, cache = self.inner.step(tokens, state.cache)  # the inner model's buffer, masked in place
        run = (state.open_run + 1) * opened.long()  # opening brackets in a row
        nxt = TreeState(cache, depth, tags, state.words, state.rules, state.stack, run, written, state.limit)
        log_probs.masked_fill_(~self.allowed(nxt), -math.inf)
        return log_probs, nxt

    def allowed(self, s: TreeState) -> Tensor:
        """(N, V) bool: the tokens each row may write next."""
        N, V = s.depth.size(0), self.is_tag.size(0)
        rows_n = torch.arange(N, device=s.depth.device)
        done = s.tags >= s.words  # (N,) every word has its tag
        rule = s.rules[rows_n, s.tags.clamp(max=s.rules.size(1) - 1)]  # (N,) the next word's rule
        tags = torch.where((rule >= 0)[:, None], torch.arange(V, device=rule.device)[None, :] == rule[:, None],
                           self.is_tag[None, :] & ~(self.is_punctuation[None, :] & (rule == NO_PUNCTUATION)[:, None]))
        allowed = (tags & (s.depth > 0)[:, None]) | self.is_open[None, :]  # (N, V): one root
        allowed &= ~done[:, None]
        # The budget: after this bracket, the remaining tags, depth + 1 closes and </s> must still fit.
        fits = s.written + 1 + (s.words - s.tags) + s.depth + 1 + 1 <= s.limit
        bounds = (s.depth < self.shape.depth) & (s.open_run < self.shape.open_run)  # as deep as training trees go
        allowed[:, self.is_open] &= (bounds & (fits | (s.depth == 0)))[:, None]
        may_close = (s.depth > 0) & (s.open_run == 0) & ((s.depth > 1) | done)  # the root closes last
        top = s.stack[rows_n, (s.depth - 1).clamp(min=0)]  # (N,)
        rows = (may_close & (top >= 0)).nonzero()[:, 0]
        allowed[rows, top[rows]] = True
        allowed[:, self.eos_id] = done & (s.depth == 0)
        return allowed
