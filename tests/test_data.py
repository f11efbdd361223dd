"""Corpus reading (errors name file and line), the token store, length filtering, token-count batching (§5.1)."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from aiayn.data.batching import PADDED_LIMIT, BatchStream, collate, corpus_batch, make_batches
from aiayn.data.sources import Chunk, Source, find_file, read_lines
from aiayn.data.store import TokenStore, encode_chunk, prepare, store_key


def write(path, lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def test_reads_plain_and_gzip(tmp_path):
    write(tmp_path / "a.en", ["one", "two words"])
    write(tmp_path / "a.de.gz", ["eins", "zwei Wörter"])
    src, tgt = Source(str(tmp_path / "a"), "en", "de").read()
    assert src == ["one", "two words"] and tgt == ["eins", "zwei Wörter"]


@pytest.mark.parametrize("short", ["de", "en"])
def test_mismatched_line_counts_name_file_and_line(tmp_path, short):
    write(tmp_path / "a.en", ["1", "2", "3"] if short == "de" else ["1", "2"])
    write(tmp_path / "a.de", ["1", "2"] if short == "de" else ["1", "2", "3", "4"])
    long_ = "en" if short == "de" else "de"
    counts = "(3 source lines, 2 target lines)" if short == "de" else "(2 source lines, 4 target lines)"
    with pytest.raises(ValueError) as err:
        Source(str(tmp_path / "a"), "en", "de").read()
    assert f"a.{long_}:3: line has no partner: " in str(err.value)
    assert str(err.value).endswith(f"a.{short} ends after line 2 {counts}")


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "bad.de").write_bytes(b"gut\nauch gut\nschlecht \xff\n")
    with pytest.raises(ValueError, match=r"bad\.de:3: not valid UTF-8"):
        read_lines(tmp_path / "bad.de")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.en"):
        find_file(tmp_path / "nothing", "en")


class WordIds:
    """A tokenizer: one id per word (its length), then </s>."""

    proto = b"one id per word"  # what the store's key hashes

    def encode_source(self, texts):
        return [[min(len(w), 9) + 3 for w in t.split()] + [2] for t in texts]

    encode_target = encode_source


def test_filter_reports_empty_and_too_long_pairs(monkeypatch):
    import aiayn.data.store as store

    monkeypatch.setattr(store, "_TOKENIZER", WordIds())
    src = ["a b", "", "a b c d e f", "a"]
    tgt = ["x", "y", "z", "   "]
    *_, lines, report = encode_chunk(Chunk(1, src, tgt), 4, np.dtype(np.uint16))
    assert (report.kept, report.empty, report.too_long) == (1, 2, 1)
    assert lines.tolist() == [1] and report.examples == [2, 3, 4]
    assert "dropped 3" in str(report)


def parallel_files(tmp_path: Path, n: int = 300) -> tuple[list[str], list[str]]:
    en = read_lines(MULTI30K / "val.en.gz")[:n]
    de = read_lines(MULTI30K / "val.de.gz")[:n]
    en[5], de[9] = "", "   "  # dropped as empty, and counted
    write(tmp_path / "text.en", en)
    write(tmp_path / "text.de.gz", de)
    return en, de


def build(source: Source, folder: Path, workers: int = 1, max_subwords: int = 20) -> TokenStore:
    key = store_key(source, WordIds(), max_subwords)
    return prepare(source, WordIds(), 16, max_subwords, folder, key, workers, log=lambda _: None)


def test_the_store_round_trips_and_counts_what_it_drops(tmp_path):
    en, de = parallel_files(tmp_path)
    store = build(Source(str(tmp_path / "text"), "en", "de"), tmp_path / "store", workers=2)
    kept = [
        i for i in range(300) if en[i].strip() and de[i].strip() and len(en[i].split()) < 20 and len(de[i].split()) < 20
    ]
    assert store.lines.tolist() == [i + 1 for i in kept]
    assert store.src.tolist() == WordIds().encode_source([en[i] for i in kept])
    assert store.tgt.tolist() == WordIds().encode_target([de[i] for i in kept])
    assert store.src.ids.dtype == np.uint16  # 16 ids fit
    r = store.report
    assert (r.kept, r.empty, r.too_long) == (len(kept), 2, 300 - len(kept) - 2)
    # the same store on one worker, and in small chunks
    one = build(Source(str(tmp_path / "text"), "en", "de"), tmp_path / "one", workers=1)
    assert one.src.tolist() == store.src.tolist() and one.lines.tolist() == store.lines.tolist()


def test_the_four_input_forms_give_the_same_store(tmp_path):
    en, de = parallel_files(tmp_path, 120)
    (tmp_path / "text.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(en, de)))
    (tmp_path / "named.tsv").write_text("de\ten\n" + "".join(f"{t}\t{s}\n" for s, t in zip(en, de)))
    with gzip.open(tmp_path / "text.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"en": s, "de": t}) + "\n" for s, t in zip(en, de))
    (tmp_path / "nested.jsonl").write_text(
        "".join(json.dumps({"translation": {"de": t, "en": s}}) + "\n" for s, t in zip(en, de))
    )
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"translation": [{"en": s, "de": t} for s, t in zip(en, de)]}).save_to_disk(
        str(tmp_path / "saved")
    )
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"en": en, "de": de})}).save_to_disk(
        str(tmp_path / "dict")
    )
    specs = [
        str(tmp_path / "text"),
        str(tmp_path / "text.tsv"),
        str(tmp_path / "named.tsv"),
        str(tmp_path / "text.jsonl.gz"),
        str(tmp_path / "nested.jsonl"),
        {"dataset": str(tmp_path / "saved")},
        {"dataset": str(tmp_path / "dict"), "split": "train"},
    ]
    stores = [build(Source(spec, "en", "de"), tmp_path / f"store{i}") for i, spec in enumerate(specs)]
    for spec, store in zip(specs[1:], stores[1:]):
        assert store.src.tolist() == stores[0].src.tolist() and store.tgt.tolist() == stores[0].tgt.tolist()
        header = spec == str(tmp_path / "named.tsv")  # line 1 names the columns: the pairs start on line 2
        assert store.lines.tolist() == (stores[0].lines + header).tolist()


@pytest.mark.parametrize(
    "name, text, error",
    [
        ("bad.tsv", "one\teins\ntwo\n", r"bad\.tsv:2: 1 tab-separated field\(s\) where 2 are expected"),
        ("bad.jsonl", '{"en": "one", "de": "eins"}\n{"en": "two"}\n', r"bad\.jsonl:2: no key 'de' \(keys: 'en'\)"),
        ("bad2.jsonl", '{"en": "one", "de": "eins"}\n[1]\n', r"bad2\.jsonl:2: expected an object"),
        ("bad3.jsonl", '{"en": "one", "de": 3}\n', r"bad3\.jsonl:1: int, not a string, at 'de'"),
        ("bad4.jsonl", '{"en": "one", "de": "eins"}\nnot json\n', r"bad4\.jsonl:2: not a JSON object"),
    ],
)
def test_a_bad_row_names_its_file_and_line(tmp_path, name, text, error):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=error):
        Source(str(tmp_path / name), "en", "de").read()


def test_a_dataset_that_is_not_there_is_one_line_naming_it(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(FileNotFoundError, match=r"data\.train: dataset 'nobody/wmt99': .*HF_DATASETS_OFFLINE"):
        Source({"dataset": "nobody/wmt99", "config": "de-en", "split": "train"}, "en", "de", "data.train").read()


def test_a_line_without_partner_found_at_the_end_leaves_no_store(tmp_path):
    en, de = parallel_files(tmp_path)
    write(tmp_path / "text.de.gz", de[:-1])
    with pytest.raises(ValueError, match="line has no partner"):
        build(Source(str(tmp_path / "text"), "en", "de"), tmp_path / "store", workers=2)
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == []


def test_a_killed_preparation_is_built_again_and_a_finished_one_reused(tmp_path, monkeypatch):
    from aiayn import faults

    parallel_files(tmp_path)
    source = Source(str(tmp_path / "text"), "en", "de")
    key = store_key(source, WordIds(), 20)

    def killed(name, **_):
        if name == "store.before-meta":
            raise KeyboardInterrupt  # a kill between the renames and store.json

    monkeypatch.setattr(faults, "point", killed)
    with pytest.raises(KeyboardInterrupt):
        build(source, tmp_path / "store")
    assert not TokenStore.is_built(tmp_path / "store", key)
    monkeypatch.undo()
    whole = build(source, tmp_path / "store")
    assert TokenStore.is_built(tmp_path / "store", key) and len(whole) == whole.report.kept
    assert not TokenStore.is_built(tmp_path / "store", store_key(source, WordIds(), 19))  # another limit: rebuilt


def test_a_batch_from_the_store_is_the_pairs_padded_and_shifted(tmp_path):
    parallel_files(tmp_path)
    store = build(Source(str(tmp_path / "text"), "en", "de"), tmp_path / "store")
    rows = [7, 0, 31]
    b = corpus_batch(store, np.array(rows), pad_id=0, bos_id=1)
    src, tgt = [store.src[i].tolist() for i in rows], [store.tgt[i].tolist() for i in rows]
    S, T = max(map(len, src)), max(map(len, tgt))
    assert b.src.tolist() == [s + [0] * (S - len(s)) for s in src]
    assert b.tgt_out.tolist() == [t + [0] * (T - len(t)) for t in tgt]
    assert b.tgt_in.tolist() == [[1] + t[:-1] + [0] * (T - len(t)) for t in tgt]
    assert (b.n_src, b.n_tgt) == (sum(map(len, src)), sum(map(len, tgt)))


def reference_batches(src_lens, tgt_lens, batch_tokens, seed, epoch):
    """make_batches as it was over Python lists: the batches a seed gave before the token store."""
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(src_lens)))
    rng.shuffle(order)
    order.sort(key=lambda i: (max(src_lens[i], tgt_lens[i]), min(src_lens[i], tgt_lens[i])))
    limit = PADDED_LIMIT * batch_tokens
    batches, batch = [], []
    n_src = n_tgt = longest_src = longest_tgt = 0
    for i in order:
        s, t = src_lens[i], tgt_lens[i]
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


@pytest.mark.parametrize("budget", [60, 600, 3600])
def test_batches_are_those_of_the_list_code_for_the_same_seed(budget):
    for src_lens, tgt_lens in (lengths(5000, seed=3), multi30k_lengths()):
        for seed, epoch in ((1, 1), (1, 2), (7, 5)):
            got = make_batches(np.array(src_lens), np.array(tgt_lens), budget, seed, epoch)
            assert [b.tolist() for b in got] == reference_batches(src_lens, tgt_lens, budget, seed, epoch)


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

    def batches(seed, epoch):
        return [b.tolist() for b in make_batches(src_lens, tgt_lens, 300, seed=seed, epoch=epoch)]

    a = batches(1, 1)
    assert a == batches(1, 1)
    assert a != batches(1, 2)
    assert a != batches(2, 1)


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
    assert [a.next().tolist() for _ in range(len(a))] == [b.next().tolist() for _ in range(len(b))]


def test_collate_pads_and_shifts_the_target_right():
    b = collate([[5, 6, 2], [7, 2]], [[8, 2], [9, 10, 11, 2]], pad_id=0, bos_id=1)
    assert b.src.tolist() == [[5, 6, 2], [7, 2, 0]]
    assert b.tgt_out.tolist() == [[8, 2, 0, 0], [9, 10, 11, 2]]
    assert b.tgt_in.tolist() == [[1, 8, 0, 0], [1, 9, 10, 11]]
    assert (b.n_src, b.n_tgt) == (5, 6)


def test_the_vocabulary_sample_is_the_whole_stream_when_it_fits_and_uniform_when_it_does_not():
    from aiayn.data.vocab import sample_sentences

    lines = [f"sentence {i}" for i in range(1000)]
    assert sample_sentences(iter(lines), 1000) == lines  # what SentencePiece was given before the stream
    assert sample_sentences(iter(lines), 5000) == lines
    drawn = sample_sentences(iter(lines), 100)
    assert len(set(drawn)) == 100 and drawn == sample_sentences(iter(lines), 100)  # k distinct, by seed
    counts = np.zeros(1000)
    for seed in range(300):  # each sentence is drawn with probability k / n wherever it stands in the stream
        for s in sample_sentences(iter(lines), 100, seed=seed):
            counts[int(s.split()[1])] += 1
    first, last = counts[:500].mean() / 300, counts[500:].mean() / 300
    assert abs(first - 0.1) < 0.01 and abs(last - 0.1) < 0.01


def test_a_dataset_name_resolves_offline_from_the_local_cache(tmp_path):
    """{dataset: NAME, config, split} with HF_DATASETS_OFFLINE=1: the dataset as datasets' cache holds it after a
    load_dataset online, laid out here from a local JSON Lines file (the cache of a hub dataset named someone/tiny)."""
    datasets = pytest.importorskip("datasets")
    import shutil
    import subprocess
    import sys

    pairs = [("a dog runs", "ein Hund rennt"), ("two cats", "zwei Katzen")]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"translation": {"en": s, "de": t}}) + "\n" for s, t in pairs))
    built = tmp_path / "built"
    datasets.load_dataset("json", data_files={"train": str(tmp_path / "d.jsonl")}, cache_dir=str(built))
    info = next(built.glob("json/*/0.0.0/*/dataset_info.json"))
    named = tmp_path / "cache" / "someone___tiny" / "de-en" / "0.0.0" / info.parent.name
    named.mkdir(parents=True)
    shutil.copy(info.parent / "json-train.arrow", named / "tiny-train.arrow")
    meta = json.loads(info.read_text())
    meta.update(builder_name="tiny", dataset_name="tiny", config_name="de-en")
    (named / "dataset_info.json").write_text(json.dumps(meta))
    read = (
        "import json; from aiayn.data.sources import Source; "
        "print(json.dumps(Source({'dataset': 'someone/tiny', 'config': 'de-en', 'split': 'train'}, 'en', 'de').read()))"
    )
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(tmp_path / "cache"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [[s for s, _ in pairs], [t for _, t in pairs]]


def test_workers_encode_the_same_store_as_one_process(tmp_path):
    from aiayn.data.vocab import Vocab

    en, de = parallel_files(tmp_path)
    vocab = Vocab.train(en + de, 300)
    source = Source(str(tmp_path / "text"), "en", "de")
    key = store_key(source, vocab, 64)
    alone = prepare(source, vocab, len(vocab), 64, tmp_path / "alone", key, workers=1, log=lambda _: None)
    pool = prepare(source, vocab, len(vocab), 64, tmp_path / "pool", key, workers=2, log=lambda _: None, chunk=37)
    assert pool.src.tolist() == alone.src.tolist() == vocab.encode_source([en[i] for i in alone.lines - 1])
    assert pool.tgt.tolist() == alone.tgt.tolist() and pool.lines.tolist() == alone.lines.tolist()
    assert pool.report == alone.report and pool.report.empty == 2
