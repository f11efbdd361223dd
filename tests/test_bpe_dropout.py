"""BPE-dropout (data/bpe_dropout.py): each epoch its own segmentation, a function of (seed, epoch) alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiayn.data.batching import BatchStream
from aiayn.data.bpe_dropout import SampledEpochs, merge_tree
from aiayn.data.corpus import encode_pairs, read_lines
from aiayn.data.vocab import Vocab
from aiayn.recipe import load_recipe

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"


@pytest.fixture(scope="module")
def text():
    src, tgt = read_lines(f"{VAL}.en.gz")[:300], read_lines(f"{VAL}.de.gz")[:300]
    vocab = Vocab.train(src + tgt, 600)
    base, _ = encode_pairs(src, tgt, vocab.encode_source, vocab.encode_target, max_subwords=64)
    return base, vocab


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
    assert resumed.corpus(3) == epochs[2]
    assert epochs[0].src != epochs[1].src and epochs[0].tgt != epochs[1].tgt
    assert epochs[0].src != SampledEpochs(base, vocab, 0.1, seed=2, max_subwords=64).corpus(1).src
    assert epochs[0].lines == base.lines
    for side, sampled in (("src", epochs[0].src), ("tgt", epochs[0].tgt)):
        assert [vocab.decode(ids) for ids in sampled] == [vocab.decode(ids) for ids in getattr(base, side)]
        assert all(ids[-1] == vocab.eos_id for ids in sampled)
    # each merge skipped with p = 0.1: more, shorter pieces than the deterministic segmentation
    assert sum(map(len, epochs[0].src)) > 1.1 * sum(map(len, base.src))
    assert SampledEpochs(base, vocab, 0.0, seed=1, max_subwords=64).corpus(1) == base


def test_a_sample_longer_than_the_limit_keeps_the_deterministic_ids(text):
    base, vocab = text
    limit = max(map(len, base.src + base.tgt))
    epoch = SampledEpochs(base, vocab, 0.5, seed=1, max_subwords=limit).corpus(1)
    assert max(map(len, epoch.src + epoch.tgt)) <= limit
    kept = [i for i, (s, t) in enumerate(zip(epoch.src, epoch.tgt)) if (s, t) == (base.src[i], base.tgt[i])]
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
