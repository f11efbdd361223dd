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
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .store import Corpus

PADDED_LIMIT = 1.5  # padded tokens per side <= PADDED_LIMIT x batch_tokens


class Batch(NamedTuple):
    src: Tensor  # (B, S) source ids ending in </s>, padded
    tgt_in: Tensor  # (B, T) <s> + target, shifted right
    tgt_out: Tensor  # (B, T) target ending in </s>
    n_src: int  # non-pad source tokens
    n_tgt: int  # non-pad target tokens


def make_batches(
    src_lens: Sequence[int], tgt_lens: Sequence[int], batch_tokens: int, seed: int, epoch: int
) -> list[np.ndarray]:
    """Pair indices grouped into batches: shuffle, sort by length (ties stay shuffled), fill, shuffle batches.

    Lengths are numpy arrays (or lists); the order is a function of (seed, epoch) alone. The shuffles are
    Python's `random.Random` on an int64 array, so that a seed gives the batches it gave when the corpus
    was a list of lists, with 8 bytes a pair where the list held 36.
    """
    src_lens, tgt_lens = np.asarray(src_lens, dtype=np.int64), np.asarray(tgt_lens, dtype=np.int64)
    longer, shorter = np.maximum(src_lens, tgt_lens), np.minimum(src_lens, tgt_lens)
    if len(longer) and longer.max() > batch_tokens:
        worst = int(np.flatnonzero(longer > batch_tokens)[0])
        raise ValueError(
            f"pair {worst} has {longer[worst]} tokens on one side, more than batch_tokens {batch_tokens}: "
            "raise train.batch_tokens or lower data.max_subwords"
        )
    rng = random.Random(seed * 100_003 + epoch)
    order = np.arange(len(longer), dtype=np.int64)
    rng.shuffle(order)  # type: ignore[arg-type]  # the same swaps as on list(range(n))
    # the longer side, then the shorter; stable: equal lengths keep the shuffled order
    order = order[np.lexsort((shorter[order], longer[order]))]
    src_sums = np.concatenate(([0], np.cumsum(src_lens[order])))  # (n + 1,) real tokens before each pair
    tgt_sums = np.concatenate(([0], np.cumsum(tgt_lens[order])))
    longest = longer[order]  # nondecreasing: a batch's longest sentence, either side, is its last pair's longer one
    limit = PADDED_LIMIT * batch_tokens
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        # the longest run from start that keeps both sides' real tokens within batch_tokens ...
        end = (
            min(
                np.searchsorted(src_sums, src_sums[start] + batch_tokens, side="right"),
                np.searchsorted(tgt_sums, tgt_sums[start] + batch_tokens, side="right"),
            )
            - 1
        )
        # ... and sentences x longest sentence within the padded limit (the product grows with each pair)
        sizes = np.arange(1, end - start + 1) * longest[start:end]
        end = start + max(1, int(np.searchsorted(sizes, limit, side="right")))
        batches.append(order[start:end])
        start = end
    rng.shuffle(batches)
    return batches


def rank_share(batches: list[tuple[np.ndarray, int]], rank: int, world: int) -> list[tuple[np.ndarray, int]]:
    """The batches of one optimizer step that rank trains on: r, r + world, ... (torchrun); the ranks together
    train on each batch once."""
    return batches[rank::world]


def collate(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], pad_id: int, bos_id: int) -> Batch:
    """Pad a list of pairs (ids ending in </s>) into tensors; the decoder input starts with <s>."""
    corpus = Corpus.from_lists(src, tgt, range(len(src)))
    return corpus_batch(corpus, np.arange(len(src)), pad_id, bos_id)


def corpus_batch(corpus: Corpus, rows: np.ndarray, pad_id: int, bos_id: int) -> Batch:
    """The pairs `rows` of a corpus (a TokenStore, or an epoch of BPE-dropout) padded into tensors; the decoder
    input is the target shifted right, starting with <s> (§3.1: predictions for position i read only outputs < i)."""
    src, src_lens = corpus.src.padded(rows, pad_id)  # (B, S)
    tgt_out, tgt_lens = corpus.tgt.padded(rows, pad_id)  # (B, T)
    tgt_in = np.full_like(tgt_out, pad_id)
    tgt_in[:, 0] = bos_id
    tgt_in[:, 1:] = tgt_out[:, :-1]
    tgt_in[np.arange(tgt_out.shape[1]) >= tgt_lens[:, None]] = pad_id  # the shifted </s> falls off the end
    return Batch(
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        int(src_lens.sum()),
        int(tgt_lens.sum()),
    )


class BatchStream:
    """Endless batches, epoch after epoch, with a position that a checkpoint saves and restores.

    lengths(epoch) -> (source lengths, target lengths) when each epoch has its own segmentation
    (BPE-dropout, data/bpe_dropout.py); otherwise every epoch batches src_lens and tgt_lens.
    """

    def __init__(
        self,
        src_lens: Sequence[int],
        tgt_lens: Sequence[int],
        batch_tokens: int,
        seed: int,
        lengths: Callable[[int], tuple[Sequence[int], Sequence[int]]] | None = None,
    ):
        self.lengths = lengths or (lambda epoch: (src_lens, tgt_lens))
        self.batch_tokens, self.seed = batch_tokens, seed
        self.epoch, self.index = 1, 0  # the next batch is batches(epoch)[index]
        self._batches = self._make(self.epoch)

    def _make(self, epoch: int) -> list[np.ndarray]:
        return make_batches(*self.lengths(epoch), self.batch_tokens, self.seed, epoch)

    def __len__(self) -> int:
        """Batches in the current epoch."""
        return len(self._batches)

    @property
    def epochs_done(self) -> float:
        """Epochs trained so far, with the fraction of the current one: 1.0 once epoch 1's last batch is out."""
        return self.epoch - 1 + self.index / max(len(self._batches), 1)

    def next(self) -> np.ndarray:
        if self.index == len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._make(self.epoch)
        self.index += 1
        return self._batches[self.index - 1]

    def step(self, n: int) -> list[tuple[np.ndarray, int]]:
        """The next n batches with the epoch each belongs to: what one optimizer step trains on, all ranks together
        (each takes its `rank_share`), so that the data order does not depend on the world size."""
        return [(self.next(), self.epoch) for _ in range(n)]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._batches = self._make(self.epoch)
