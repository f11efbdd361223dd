"""Batches by token count, sentences of similar length together (§5.1), shuffled by seed.

A batch holds at most `batch_tokens` tokens on each side, padding included: its sentence count
times its longest source (or target) sentence. Every pair appears exactly once per epoch.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import torch
from torch import Tensor


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
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))  # stable: equal lengths keep the shuffled order
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        length = max(src_lens[i], tgt_lens[i])
        if length > batch_tokens:
            raise ValueError(f"pair {i} has {length} tokens, more than batch_tokens {batch_tokens}")
        if batch and (len(batch) + 1) * max(longest, length) > batch_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, length)
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
    """Endless batches, epoch after epoch, with a position that a checkpoint saves and restores."""

    def __init__(self, src_lens: list[int], tgt_lens: list[int], batch_tokens: int, seed: int):
        self.src_lens, self.tgt_lens = src_lens, tgt_lens
        self.batch_tokens, self.seed = batch_tokens, seed
        self.epoch, self.index = 1, 0  # the next batch is batches(epoch)[index]
        self._batches = make_batches(src_lens, tgt_lens, batch_tokens, seed, self.epoch)

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self._batches)

    def next(self) -> list[int]:
        if self.index == len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = make_batches(self.src_lens, self.tgt_lens, self.batch_tokens, self.seed, self.epoch)
        self.index += 1
        return self._batches[self.index - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._batches = make_batches(self.src_lens, self.tgt_lens, self.batch_tokens, self.seed, self.epoch)
