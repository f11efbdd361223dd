"""BPE-dropout (data/bpe_dropout.py): each epoch its own segmentation, a function of (seed, epoch) alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aiayn.data.batching import BatchStream
from aiayn.data.bpe_dropout import SampledEpochs, merge_tree
from aiayn.data.sources import read_lines
from aiayn.data.store import Corpus
from aiayn.data.vocab import Vocab
from aiayn.recipe import load_recipe

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"


@pytest.fixture(scope="module")
def text():
    src, tgt = read_lines(f"{VAL}.en.gz")[:300], read_lines(f"{VAL}.de.gz")[:300]
    vocab = Vocab.train(src + tgt, 600)
    base = Corpus.from_lists(vocab.encode_source(src), vocab.encode_target(tgt), range(1, len(src) + 1))
    return base, vocab


def lists(corpus: Corpus) -> tuple[list[list[int]], list[list[int]], list[int]]:
    return corpus.src.tolist(), corpus.tgt.tolist(), corpus.lines.tolist()


def reference_sample(sampled: SampledEpochs, rows: list[list[int]], rng: np.random.Generator) -> list[list[int]]:
    """The sampling as it was over lists of lists, before the token store: the same draws, the same ids."""
    ids = np.fromiter((i for r in rows for i in r), dtype=np.int64)
    row = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    undrawn = np.ones(len(ids), dtype=bool)
    while undrawn.any():
        split = undrawn & (rng.random(len(ids)) >= sampled.keep[ids])
        counts = 1 + split
        first = np.cumsum(counts) - counts
        out = np.repeat(ids, counts)
        out[first[split]], out[first[split] + 1] = sampled.left[ids[split]], sampled.right[ids[split]]
        undrawn = np.zeros(len(out), dtype=bool)
        undrawn[first[split]] = undrawn[first[split] + 1] = True
        ids, row = out, np.repeat(row, counts)
    bounds = np.searchsorted(row, np.arange(len(rows) + 1))
    return [ids[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]


def test_an_epoch_is_the_one_the_list_code_sampled(text):
    base, vocab = text
    limit = 40
    sampled = SampledEpochs(base, vocab, 0.3, seed=4, max_subwords=limit)
    rng = np.random.default_rng([4, 2])
    src, tgt = reference_sample(sampled, base.src.tolist(), rng), reference_sample(sampled, base.tgt.tolist(), rng)
    fits = [len(s) <= limit and len(t) <= limit for s, t in zip(src, tgt)]
    assert not all(fits)
    src = [s if ok else b for s, b, ok in zip(src, base.src.tolist(), fits)]
    tgt = [t if ok else b for t, b, ok in zip(tgt, base.tgt.tolist(), fits)]
    assert lists(sampled.corpus(2)) == (src, tgt, base.lines.tolist())


def test_each_piece_splits_into_the_two_pieces_its_last_merge_joined(text):
    _, vocab = text
    left, right = merge_tree(vocab)
    pieces = [vocab.sp.id_to_piece(i) for i in range(len(vocab))]
    merged = [i for i in range(len(vocab)) if left[i] >= 0]
    assert len(merged) > 0.5 * len(vocab)
    for i in merged:  # the halves spell the piece, and were pieces before it (a higher score: merged earlier)
        assert pieces[left[i]] + pieces[right[i]] == pieces[i]
        assert (
            min(vocab.sp.get_score(int(left[i])), vocab.sp.get_score(int(right[i]))) > vocab.sp.get_score(i)
            or len(pieces[left[i]]) == 1
            or len(pieces[right[i]]) == 1
        )
    for i in (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id):
        assert left[i] == right[i] == -1
    assert all(left[i] == -1 for i in range(len(vocab)) if len(pieces[i]) == 1)  # characters stay whole


def test_an_epochs_segmentation_spells_the_same_text_and_depends_on_seed_and_epoch_only(text):
    base, vocab = text
    one = SampledEpochs(base, vocab, 0.1, seed=1, max_subwords=64)
    epochs = [one.corpus(e) for e in (1, 2, 3)]
    resumed = SampledEpochs(base, vocab, 0.1, seed=1, max_subwords=64)  # a run resumed in epoch 3
    assert lists(resumed.corpus(3)) == lists(epochs[2])
    epochs = [lists(e) for e in epochs]
    assert epochs[0][0] != epochs[1][0] and epochs[0][1] != epochs[1][1]
    assert epochs[0][0] != SampledEpochs(base, vocab, 0.1, seed=2, max_subwords=64).corpus(1).src.tolist()
    assert epochs[0][2] == base.lines.tolist()
    for sampled, deterministic in ((epochs[0][0], base.src), (epochs[0][1], base.tgt)):
        assert [vocab.decode(ids) for ids in sampled] == [vocab.decode(ids) for ids in deterministic.tolist()]
        assert all(ids[-1] == vocab.eos_id for ids in sampled)
    # each merge skipped with p = 0.1: more, shorter pieces than the deterministic segmentation
    assert sum(map(len, epochs[0][0])) > 1.1 * len(base.src.ids)
    assert lists(SampledEpochs(base, vocab, 0.0, seed=1, max_subwords=64).corpus(1)) == lists(base)


def test_a_sample_longer_than_the_limit_keeps_the_deterministic_ids(text):
    base, vocab = text
    src, tgt, _ = lists(base)
    limit = max(map(len, src + tgt))
    epoch_src, epoch_tgt, _ = lists(SampledEpochs(base, vocab, 0.5, seed=1, max_subwords=limit).corpus(1))
    assert max(map(len, epoch_src + epoch_tgt)) <= limit
    kept = [i for i, (s, t) in enumerate(zip(epoch_src, epoch_tgt)) if (s, t) == (src[i], tgt[i])]
    assert kept and len(kept) < len(base)  # some pairs fell back, the rest were sampled


def test_a_stream_batches_each_epoch_by_its_own_lengths():
    lengths = {1: ([3] * 40, [3] * 40), 2: ([6] * 40, [6] * 40)}
    stream = BatchStream([3] * 40, [3] * 40, 30, seed=1, lengths=lengths.__getitem__)
    first = [stream.next() for _ in range(len(stream))]
    assert len(first) == 4 and stream.epoch == 1  # 10 pairs of 3 tokens a batch
    stream.next()
    assert len(stream) == 8 and stream.epoch == 2  # 5 pairs of 6


def test_a_recipe_refuses_bpe_dropout_out_of_range_or_for_parsing():
    with pytest.raises(ValueError, match=r"data.bpe_dropout = 1.0: must be at least 0 and below 1"):
        load_recipe(REPO / "recipes" / "tiny.yaml", ["--data.bpe_dropout=1.0"])
    with pytest.raises(ValueError, match="parsing"):
        load_recipe(REPO / "recipes" / "ptb-parse.yaml", ["--data.bpe_dropout=0.1"])
