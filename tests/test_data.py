"""Corpus reading (errors name file and line), length filtering, token-count batching (§5.1)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from aiayn.data.batching import PADDED_LIMIT, BatchStream, collate, make_batches
from aiayn.data.corpus import encode_pairs, find_file, read_lines, read_parallel


def write(path, lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def test_reads_plain_and_gzip(tmp_path):
    write(tmp_path / "a.en", ["one", "two words"])
    write(tmp_path / "a.de.gz", ["eins", "zwei Wörter"])
    src, tgt = read_parallel(find_file(tmp_path / "a", "en"), find_file(tmp_path / "a", "de"))
    assert src == ["one", "two words"] and tgt == ["eins", "zwei Wörter"]


def test_mismatched_line_counts_name_file_and_line(tmp_path):
    write(tmp_path / "a.en", ["1", "2", "3"])
    write(tmp_path / "a.de", ["1", "2"])
    with pytest.raises(ValueError, match=r"a\.en:3: line has no partner: .*a\.de ends after line 2"):
        read_parallel(tmp_path / "a.en", tmp_path / "a.de")


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "bad.de").write_bytes(b"gut\nauch gut\nschlecht \xff\n")
    with pytest.raises(ValueError, match=r"bad\.de:3: not valid UTF-8"):
        read_lines(tmp_path / "bad.de")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.en"):
        find_file(tmp_path / "nothing", "en")


def test_filter_reports_empty_and_too_long_pairs():
    def encode(texts):  # one id per word, then </s>
        return [[5] * len(t.split()) + [2] for t in texts]

    src = ["a b", "", "a b c d e f", "a"]
    tgt = ["x", "y", "z", "   "]
    corpus, report = encode_pairs(src, tgt, encode, encode, max_subwords=4)
    assert (report.kept, report.empty, report.too_long) == (1, 2, 1)
    assert corpus.lines == [1] and report.examples == [2, 3, 4]
    assert "dropped 3" in str(report)


def lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    return [rng.randint(1, 60) for _ in range(n)], [rng.randint(1, 60) for _ in range(n)]


MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def multi30k_lengths() -> tuple[list[int], list[int]]:
    """Real lengths: words + </s> of Multi30k's 29,000 training pairs, English and German."""

    def words(lang: str) -> list[int]:
        with gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            return [len(line.split()) + 1 for line in f]

    return words("en"), words("de")


def padded(lens: list[int], batch: list[int]) -> int:
    return len(batch) * max(lens[i] for i in batch)


@pytest.mark.parametrize("budget", [60, 257, 4096])
def test_batches_respect_the_budget_and_cover_every_pair_once(budget):
    src_lens, tgt_lens = lengths(3000)
    for epoch in (1, 2):
        batches = make_batches(src_lens, tgt_lens, budget, seed=7, epoch=epoch)
        for batch in batches:  # §5.1: real (non-padding) tokens per side; padding bounded too
            assert sum(src_lens[i] for i in batch) <= budget and sum(tgt_lens[i] for i in batch) <= budget
            assert max(padded(src_lens, batch), padded(tgt_lens, batch)) <= PADDED_LIMIT * budget
        assert sorted(i for b in batches for i in b) == list(range(3000))


@pytest.mark.parametrize("budget", [600, 3600, 25000])
def test_real_batches_are_full_and_little_padded(budget):
    src_lens, tgt_lens = multi30k_lengths()
    batches = make_batches(src_lens, tgt_lens, budget, seed=1, epoch=1)
    assert sorted(i for b in batches for i in b) == list(range(len(src_lens)))
    fill = sorted(max(sum(src_lens[i] for i in b), sum(tgt_lens[i] for i in b)) / budget for b in batches)
    assert fill[-1] <= 1 and fill[1] >= 0.9, fill[:3]  # all but the epoch's last are at least 90% full
    real = sum(src_lens) + sum(tgt_lens)
    assert sum(padded(src_lens, b) + padded(tgt_lens, b) for b in batches) < 1.15 * real  # similar lengths together


def test_batching_is_deterministic_by_seed_and_epoch():
    src_lens, tgt_lens = lengths(500)
    a = make_batches(src_lens, tgt_lens, 300, seed=1, epoch=1)
    assert a == make_batches(src_lens, tgt_lens, 300, seed=1, epoch=1)
    assert a != make_batches(src_lens, tgt_lens, 300, seed=1, epoch=2)
    assert a != make_batches(src_lens, tgt_lens, 300, seed=2, epoch=1)


def test_a_pair_longer_than_the_budget_is_an_error():
    with pytest.raises(ValueError, match="pair 1 has 100 tokens on one side, more than batch_tokens 50"):
        make_batches([10, 100], [10, 10], 50, seed=0, epoch=1)


def test_stream_counts_epochs_done():
    src_lens, tgt_lens = lengths(200)
    stream = BatchStream(src_lens, tgt_lens, 200, seed=3)
    assert stream.epochs_done == 0
    for _ in range(len(stream)):
        stream.next()
    assert stream.epochs_done == 1 and stream.epoch == 1  # the first epoch's last batch is out, none of the second
    stream.next()
    assert stream.epochs_done == pytest.approx(1 + 1 / len(stream)) and stream.epoch == 2


def test_stream_resumes_at_its_saved_position():
    src_lens, tgt_lens = lengths(200)
    a = BatchStream(src_lens, tgt_lens, 200, seed=3)
    for _ in range(len(a) + 5):  # into the second epoch
        a.next()
    b = BatchStream(src_lens, tgt_lens, 200, seed=3)
    b.load_state_dict(a.state_dict())
    assert [a.next() for _ in range(len(a))] == [b.next() for _ in range(len(b))]


def test_collate_pads_and_shifts_the_target_right():
    b = collate([[5, 6, 2], [7, 2]], [[8, 2], [9, 10, 11, 2]], pad_id=0, bos_id=1)
    assert b.src.tolist() == [[5, 6, 2], [7, 2, 0]]
    assert b.tgt_out.tolist() == [[8, 2, 0, 0], [9, 10, 11, 2]]
    assert b.tgt_in.tolist() == [[1, 8, 0, 0], [1, 9, 10, 11]]
    assert (b.n_src, b.n_tgt) == (5, 6)
