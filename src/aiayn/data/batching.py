"""Batches by token count, sentences of similar length together (§5.1), shuffled by seed.

§5.1: "each training batch contained a set of sentence pairs containing approximately 25000
source tokens and 25000 target tokens". A batch here holds at most `batch_tokens` real
(non-padding) tokens on each side. Pairs are sorted by their longer side, so a batch's
sentences have similar lengths and little padding; its padded size (sentences x longest
sentence, each side) is also capped at PADDED_LIMIT x batch_tokens, so that memory stays
bounded whatever the lengths. Every pair appears exactly once per epoch.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

PADDED_LIMIT = 1.5  # padded tokens per side <= PADDED_LIMIT x batch_tokens


class Batch(NamedTuple):
    src: Tensor  # (B, S) source ids ending in </s>, padded
    tgt_in: Tensor  # (B, T) <s> + target, shifted right
    tgt_out: Tensor  # (B, T) target ending in </s>
    n_src: int  # non-pad source tokens
    n_tgt: int  # non-pad target tokens


def make_batches(src_lens: list[int], tgt_lens: list[int], batch_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Pair indices grouped into batches: shuffle, sort by length (ties stay shuffled), fill, shuffle batches."""
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(src_lens)))
    rng.shuffle(order)
    # the longer side, then the shorter; stable: equal lengths keep the shuffled order
    order.sort(key=lambda i: (max(src_lens[i], tgt_lens[i]), min(src_lens[i], tgt_lens[i])))
    limit = PADDED_LIMIT * batch_tokens
    batches: list[list[int]] = []
    batch: list[int] = []
    n_src = n_tgt = longest_src = longest_tgt = 0  # the batch being filled: real tokens, longest sentence
    for i in order:
        s, t = src_lens[i], tgt_lens[i]
        if max(s, t) > batch_tokens:
            raise ValueError(
                f"pair {i} has {max(s, t)} tokens on one side, more than batch_tokens {batch_tokens}: "
                "raise train.batch_tokens or lower data.max_subwords"
            )
        n = len(batch) + 1
        fits = (
            n_src + s <= batch_tokens
            and n_tgt + t <= batch_tokens
            and n * max(longest_src, s) <= limit
            and n * max(longest_tgt, t) <= limit
        )
        if batch and not fits:
            batches.append(batch)
            batch, n_src, n_tgt, longest_src, longest_tgt = [], 0, 0, 0, 0
        batch.append(i)
        n_src, n_tgt = n_src + s, n_tgt + t
        longest_src, longest_tgt = max(longest_src, s), max(longest_tgt, t)
    if batch:
        batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(src: list[list[int]], tgt: list[list[int]], pad_id: int, bos_id: int) -> Batch:
    """Pad a list of pairs (ids ending in </s>) into tensors; the decoder input starts with <s>."""
    B, S, T = len(src), max(map(len, src)), max(map(len, tgt))
    src_t = torch.full((B, S), pad_id, dtype=torch.long)
    tgt_out = torch.full((B, T), pad_id, dtype=torch.long)
    tgt_in = torch.full((B, T), pad_id, dtype=torch.long)
    for b, (s, t) in enumerate(zip(src, tgt)):
        src_t[b, : len(s)] = torch.tensor(s)
        tgt_out[b, : len(t)] = torch.tensor(t)
        tgt_in[b, 0] = bos_id
        tgt_in[b, 1 : len(t)] = torch.tensor(t[:-1])
    return Batch(src_t, tgt_in, tgt_out, sum(map(len, src)), sum(map(len, tgt)))


class BatchStream:
    """Endless batches, epoch after epoch, with a position that a checkpoint saves and restores.

    lengths(epoch) -> (source lengths, target lengths) when each epoch has its own segmentation
    (BPE-dropout, data/bpe_dropout.py); otherwise every epoch batches src_lens and tgt_lens.
    """

    def __init__(
        self,
        src_lens: list[int],
        tgt_lens: list[int],
        batch_tokens: int,
        seed: int,
        lengths: Callable[[int], tuple[list[int], list[int]]] | None = None,
    ):
        self.lengths = lengths or (lambda epoch: (src_lens, tgt_lens))
        self.batch_tokens, self.seed = batch_tokens, seed
        self.epoch, self.index = 1, 0  # the next batch is batches(epoch)[index]
        self._batches = self._make(self.epoch)

    def _make(self, epoch: int) -> list[list[int]]:
        return make_batches(*self.lengths(epoch), self.batch_tokens, self.seed, epoch)

    def __len__(self) -> int:
        """Batches in the current epoch."""
        return len(self._batches)

    @property
    def epochs_done(self) -> float:
        """Epochs trained so far, with the fraction of the current one: 1.0 once epoch 1's last batch is out."""
        return self.epoch - 1 + self.index / max(len(self._batches), 1)

    def next(self) -> list[int]:
        if self.index == len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._make(self.epoch)
        self.index += 1
        return self._batches[self.index - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._batches = self._make(self.epoch)
