"""BPE-dropout (Provilkov et al., 2020; not in the paper): each epoch sees its own segmentation.

BPE builds a piece by merges: "riding" = "rid" + "ing", "rid" = "r" + "id", and so on down to
characters. BPE-dropout skips each merge with probability p while it segments, so a piece of n
characters, made by n - 1 merges, forms whole with probability (1 - p)^(n - 1). Here that is drawn
on each piece of the deterministic segmentation: it stays whole with that probability, or falls
into the two pieces its last merge joined, which are drawn the same way in turn. Validation, test
and translation keep the one deterministic segmentation.

An epoch's segmentation is a function of (seed, epoch) alone (NumPy's generator, not
SentencePiece's, whose sampling differs from one process to the next whatever its seed), so a
resumed run, or another rank, gets the same ids without saving anything. A sampled side longer
than data.max_subwords keeps its deterministic ids, so every pair is still seen once an epoch.
"""

from __future__ import annotations

import numpy as np

from .store import Corpus, Side
from .vocab import Vocab


def merge_tree(vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
    """(left, right): the two pieces whose merge made each piece (-1 for characters and special tokens).

    BPE on the piece's own characters, the highest-scoring merge first (SentencePiece's order, ties
    to the left): its last merge is the one that made the piece.
    """
    sp, n = vocab.sp, len(vocab)
    ids = {sp.id_to_piece(i): i for i in range(n) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))}
    left, right = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    for piece, i in ids.items():
        symbols, last = list(piece), None
        while len(symbols) > 1:
            pairs = [
                (sp.get_score(ids[a + b]), -k) for k, (a, b) in enumerate(zip(symbols, symbols[1:])) if a + b in ids
            ]
            if not pairs:
                break
            k = -max(pairs)[1]
            last = (symbols[k], symbols[k + 1])
            symbols[k : k + 2] = [symbols[k] + symbols[k + 1]]
        if symbols == [piece] and last is not None:
            left[i], right[i] = ids[last[0]], ids[last[1]]
    return left, right


class SampledEpochs:
    """The training pairs of each epoch, segmented with BPE-dropout p: `corpus(epoch)`, `lengths(epoch)`."""

    def __init__(self, base: Corpus, vocab: Vocab, p: float, seed: int, max_subwords: int):
        self.base, self.p, self.seed, self.max_subwords = base, p, seed, max_subwords
        self.left, self.right = merge_tree(vocab)
        # the merges inside each piece: n - 1 for a piece of n characters, 0 for a character
        merges = np.zeros(len(vocab), dtype=np.int64)
        for i in np.argsort([len(vocab.sp.id_to_piece(i)) for i in range(len(vocab))], kind="stable"):
            if self.left[i] >= 0:
                merges[i] = merges[self.left[i]] + merges[self.right[i]] + 1
        self.keep = (1.0 - p) ** merges  # the chance that a piece forms whole
        self._epochs: dict[int, Corpus] = {}  # this epoch and the one before (a step may hold both)

    def corpus(self, epoch: int) -> Corpus:
        """Epoch `epoch`'s ids (epochs count from 1), in memory as flat arrays."""
        if epoch not in self._epochs:
            rng = np.random.default_rng([self.seed, epoch])
            src, tgt = self._sample(self.base.src, rng), self._sample(self.base.tgt, rng)
            fits = (src.lengths() <= self.max_subwords) & (tgt.lengths() <= self.max_subwords)
            self._epochs = {e: c for e, c in self._epochs.items() if e >= epoch - 1}
            self._epochs[epoch] = Corpus(
                _choose(fits, src, self.base.src), _choose(fits, tgt, self.base.tgt), self.base.lines
            )
        return self._epochs[epoch]

    def lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        corpus = self.corpus(epoch)
        return corpus.src.lengths(), corpus.tgt.lengths()

    def _sample(self, side: Side, rng: np.random.Generator) -> Side:
        """Each piece whole with probability keep[piece], else split at its last merge; the halves drawn in turn."""
        ids = np.asarray(side.ids, dtype=np.int64)  # (tokens,)
        row = np.repeat(np.arange(len(side)), side.lengths())  # (tokens,) the sentence of each
        undrawn = np.ones(len(ids), dtype=bool)
        while undrawn.any():
            split = undrawn & (rng.random(len(ids)) >= self.keep[ids])  # keep is 1 for characters and </s>
            counts = 1 + split  # (tokens,) a split piece becomes its two halves, in place
            first = np.cumsum(counts) - counts  # where each token's first output lands
            out = np.repeat(ids, counts)
            out[first[split]], out[first[split] + 1] = self.left[ids[split]], self.right[ids[split]]
            undrawn = np.zeros(len(out), dtype=bool)
            undrawn[first[split]] = undrawn[first[split] + 1] = True  # only the new halves are drawn again
            ids, row = out, np.repeat(row, counts)
        return Side(ids, np.searchsorted(row, np.arange(len(side) + 1)))


def _choose(take: np.ndarray, side: Side, other: Side) -> Side:
    """Sentence i of side where take[i], else of other."""
    if take.all():
        return side
    lengths = np.where(take, side.lengths(), other.lengths())
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    row = np.repeat(np.arange(len(lengths)), lengths)  # (tokens,) the sentence of each output token
    within = np.arange(offsets[-1]) - offsets[row]
    ids = np.empty(offsets[-1], dtype=np.int64)
    mine = take[row]
    ids[mine] = side.ids[side.offsets[row[mine]] + within[mine]]
    ids[~mine] = other.ids[other.offsets[row[~mine]] + within[~mine]]
    return Side(ids, offsets)
