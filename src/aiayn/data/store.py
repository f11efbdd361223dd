"""The token store: a split's subword ids on disk, read through memory maps (§5.1's pairs at WMT's size).

    OUT/data/NAME/src.ids    every kept source sentence's ids end to end (uint16 when the vocabulary fits, else uint32)
    OUT/data/NAME/src.idx    int64 offsets: sentence i is src.ids[idx[i]:idx[i + 1]]
    OUT/data/NAME/tgt.ids, tgt.idx   the same for the targets
    OUT/data/NAME/lines      int64: the line (or row) number, from 1, of each kept pair in its source
    OUT/data/NAME/store.json written last: the key it was built for, the sizes, the filter's counts

`prepare` streams a Source in chunks, encodes them on `workers` processes and appends the kept pairs to
temporary files, renamed into place when the whole source has been read: a source that fails halfway (a
line without its partner found at the end) leaves no store behind, and a killed preparation starts again
from the beginning on the next run. A store whose store.json is missing, or was built for another key
(other files, tokenizer or length limit), is built anew; a finished one opens in well under a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import faults
from ..files import fsync_folder, temporary_beside
from ..weights import write_atomic
from .sources import CHUNK, Chunk, Source

FORMAT = 1
FILES = ("src.ids", "src.idx", "tgt.ids", "tgt.idx", "lines")
IN_FLIGHT = 2  # chunks queued per worker: enough to keep each busy, few enough that the text is never held


@dataclass
class FilterReport:
    """What length filtering dropped, and why."""

    kept: int = 0
    empty: int = 0  # a side with no text
    too_long: int = 0  # a side longer than max_subwords
    examples: list[int] = field(default_factory=list)  # first dropped line numbers (1-based)

    def __str__(self) -> str:
        dropped = self.empty + self.too_long
        text = f"kept {self.kept:,} pairs, dropped {dropped:,} ({self.empty:,} empty, {self.too_long:,} longer than the limit)"
        return text + (f"; first dropped lines: {self.examples}" if self.examples else "")

    def add(self, other: FilterReport) -> None:
        self.kept += other.kept
        self.empty += other.empty
        self.too_long += other.too_long
        self.examples = (self.examples + other.examples)[:5]


class Side:
    """One side's sentences: ids end to end and the offsets where each starts (and the last ends)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        self.ids, self.offsets = ids, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        """(n,) int64: each sentence's length in subwords, </s> included."""
        return np.diff(self.offsets)

    def padded(self, rows: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, L) int64 ids of the given sentences, padded with pad_id, and their (B,) lengths."""
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        positions = np.arange(int(lengths.max()))
        real = positions < lengths[:, None]  # (B, L)
        ids = np.asarray(self.ids[np.where(real, starts[:, None] + positions, 0)], dtype=np.int64)
        ids[~real] = pad_id
        return ids, lengths

    def tolist(self) -> list[list[int]]:
        return [self[i].tolist() for i in range(len(self))]


class Corpus:
    """Sentence pairs as two Sides and their line numbers: a TokenStore on disk, or an epoch in memory."""

    def __init__(self, src: Side, tgt: Side, lines: np.ndarray):
        self.src, self.tgt, self.lines = src, tgt, lines

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_lists(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], lines: Sequence[int]) -> Corpus:
        return cls(_side(src), _side(tgt), np.asarray(lines, dtype=np.int64))


def _side(rows: Sequence[Sequence[int]]) -> Side:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    return Side(np.fromiter(itertools.chain.from_iterable(rows), np.int64, count=int(offsets[-1])), offsets)


class TokenStore(Corpus):
    """A prepared split, memory-mapped: its pages are read as batches need them and shared by every rank."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        meta = json.loads((self.folder / "store.json").read_text())
        self.report = FilterReport(**meta["report"])
        dtype = np.dtype(meta["dtype"])
        n = meta["pairs"]

        def read(name: str, dt: np.dtype, count: int) -> np.ndarray:
            if count == 0:
                return np.zeros(0, dtype=dt)
            return np.memmap(self.folder / name, dtype=dt, mode="r", shape=(count,))

        src_idx, tgt_idx = read("src.idx", np.int64, n + 1), read("tgt.idx", np.int64, n + 1)
        super().__init__(
            Side(read("src.ids", dtype, int(src_idx[-1])), src_idx),
            Side(read("tgt.ids", dtype, int(tgt_idx[-1])), tgt_idx),
            read("lines", np.int64, n),
        )

    @staticmethod
    def is_built(folder: str | Path, key: str) -> bool:
        """Whether folder holds a whole store built for key (every file there, of the size store.json says)."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / "store.json").read_text())
            return (
                meta.get("format") == FORMAT
                and meta.get("key") == key
                and all((folder / name).stat().st_size == size for name, size in meta["bytes"].items())
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits, else uint32: half the disk and page cache for vocabularies up to 65,536."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def store_key(source: Source, tokenizer, max_subwords: int) -> str:
    """What a store depends on: the source (its form, and each file's path, size and time), the tokenizer's models,
    the length limit."""
    files = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in source.files()]
    protos = [
        getattr(tokenizer, name) for name in ("proto", "source_proto", "target_proto") if hasattr(tokenizer, name)
    ]
    tokens = hashlib.sha256(b"".join(protos) or repr(tokenizer).encode()).hexdigest()
    return hashlib.sha256(json.dumps([FORMAT, source.spec, files, tokens, max_subwords]).encode()).hexdigest()


# -- encoding, in worker processes

_TOKENIZER = None  # what encode_chunk encodes with: this process's, or a worker's own copy (_take_tokenizer)


def _take_tokenizer(tokenizer) -> None:
    """A worker's start: keep the tokenizer, and leave Ctrl-C to the parent, which stops the pool."""
    global _TOKENIZER
    _TOKENIZER = tokenizer
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def encode_chunk(chunk: Chunk, max_subwords: int, dtype: np.dtype) -> tuple:
    """A chunk's kept pairs as flat ids and lengths per side, their line numbers, and a FilterReport."""
    src_ids, tgt_ids = _TOKENIZER.encode_source(chunk.src), _TOKENIZER.encode_target(chunk.tgt)
    kept_src, kept_tgt, lines, report = [], [], [], FilterReport()
    for number, (s, t, s_text, t_text) in enumerate(zip(src_ids, tgt_ids, chunk.src, chunk.tgt), start=chunk.first):
        if not s_text.strip() or not t_text.strip():
            report.empty += 1
        elif len(s) > max_subwords or len(t) > max_subwords:
            report.too_long += 1
        else:
            kept_src.append(s)
            kept_tgt.append(t)
            lines.append(number)
            continue
        if len(report.examples) < 5:
            report.examples.append(number)
    report.kept = len(lines)

    def flat(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.fromiter(map(len, rows), np.int64, count=len(rows))
        return np.fromiter(itertools.chain.from_iterable(rows), dtype, count=int(lengths.sum())), lengths

    return (*flat(kept_src), *flat(kept_tgt), np.asarray(lines, dtype=np.int64), report)


def _encoded(chunks: Iterable[Chunk], tokenizer, workers: int, *args) -> Iterator[tuple]:
    """encode_chunk of each chunk, in order. A source of more than one chunk is encoded on `workers` processes,
    started fresh (spawned: they hold none of this process's files, such as the run folder's lock), with at most
    IN_FLIGHT x workers chunks queued, so that the source is never read far ahead; a worker that dies stops the
    preparation with BrokenProcessPool rather than a wait for its chunk."""
    global _TOKENIZER
    chunks = iter(chunks)
    first = list(itertools.islice(chunks, 2))
    if workers <= 1 or len(first) < 2:
        _TOKENIZER = tokenizer
        try:
            yield from (encode_chunk(c, *args) for c in itertools.chain(first, chunks))
        finally:
            _TOKENIZER = None
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, context, initializer=_take_tokenizer, initargs=(tokenizer,)) as pool:
        pending: deque = deque()
        try:
            for chunk in itertools.chain(first, chunks):
                pending.append(pool.submit(encode_chunk, chunk, *args))
                if len(pending) >= IN_FLIGHT * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:  # a failure or an early stop: what is queued is not started
                future.cancel()


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def prepare(
    source: Source,
    tokenizer,
    vocab_size: int,
    max_subwords: int,
    folder: str | Path,
    key: str,
    workers: int = 0,
    log: Callable[[str], None] = print,
    chunk: int = CHUNK,
) -> TokenStore:
    """Encode and length-filter source into a TokenStore at folder (see the module's docstring); workers 0 = the
    cores; chunk: pairs a worker takes at a time. Pairs with an empty side or a side over max_subwords (</s> included)
    are dropped and counted."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "store.json").unlink(missing_ok=True)  # from here until the end, the folder holds no store
    dtype = ids_dtype(vocab_size)
    workers = workers or cores()
    temporaries = {name: temporary_beside(folder / name) for name in FILES}
    ends = {"src.idx": 0, "tgt.idx": 0}  # the offset the next sentence starts at
    report = FilterReport()
    try:
        with contextlib.ExitStack() as open_files:
            files = {name: open_files.enter_context(open(path, "wb")) for name, path in temporaries.items()}
            for name in ("src.idx", "tgt.idx"):
                files[name].write(np.zeros(1, dtype=np.int64).tobytes())
            encoded = _encoded(source.chunks(chunk), tokenizer, workers, max_subwords, dtype)
            for src, src_len, tgt, tgt_len, lines, part in encoded:
                for side, ids, lengths in (("src", src, src_len), ("tgt", tgt, tgt_len)):
                    files[f"{side}.ids"].write(ids.tobytes())
                    files[f"{side}.idx"].write((ends[f"{side}.idx"] + np.cumsum(lengths)).tobytes())
                    ends[f"{side}.idx"] += int(lengths.sum())
                files["lines"].write(lines.tobytes())
                report.add(part)
                faults.point("store.after-chunk")
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
        if not report.kept:
            why = f"data.max_subwords is {max_subwords}" if report.too_long else "every pair has an empty side"
            raise ValueError(f"no sentence pair is left after filtering ({why}): {report}")
        for name, path in temporaries.items():
            os.replace(path, folder / name)
        fsync_folder(folder)  # the renames are on disk before store.json says the store is whole
        faults.point("store.before-meta")
        meta = {
            "format": FORMAT,
            "key": key,
            "dtype": dtype.name,
            "pairs": report.kept,
            "source": str(source),
            "report": asdict(report),
            "bytes": {name: (folder / name).stat().st_size for name in FILES},
        }
        write_atomic(folder / "store.json", json.dumps(meta, indent=2).encode())
    finally:
        for path in temporaries.values():
            path.unlink(missing_ok=True)
    log(f"{source}: {report}")
    return TokenStore(folder)
