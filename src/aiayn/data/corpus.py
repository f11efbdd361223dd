"""Parallel text: plain or gzip files, one sentence a line, read strictly (§5.1).

A mismatched line count or bytes that are not UTF-8 stop with an error naming the file and line.
Empty and over-long pairs are filtered, and the filter reports how many and why.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from zlib import error as ZlibError

import torch

EncodeFn = Callable[[list[str]], list[list[int]]]


def find_file(prefix: str | Path, lang: str) -> Path:
    """{prefix}.{lang}, or {prefix}.{lang}.gz."""
    for path in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if path.is_file():
            return path
    where = "" if Path(prefix).is_absolute() else f" (a relative path is read from the current folder, {Path.cwd()})"
    raise FileNotFoundError(f"no file {prefix}.{lang} or {prefix}.{lang}.gz{where}")


@contextlib.contextmanager
def open_bytes(path: str | Path) -> Iterator[BinaryIO]:
    """A plain or gzip (.gz) file opened to read bytes; a broken gzip stream is an error naming the file."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        try:
            yield f
        except (gzip.BadGzipFile, EOFError, ZlibError) as err:
            raise ValueError(f"{path}: not a valid gzip file ({err or 'it ends too early'})") from None


def read_lines(path: str | Path) -> list[str]:
    """The lines of a plain or gzip UTF-8 file, without their line ends (nor a byte order mark before the first)."""
    lines = []
    with open_bytes(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start : err.start + 1]
                raise ValueError(f"{path}:{number}: not valid UTF-8 (byte {err.start}: {bad!r})") from None
            lines.append((line.removeprefix("\ufeff") if number == 1 else line).rstrip("\r\n"))
    return lines


def check_split(prefix: str, src_lang: str, tgt_lang: str, field: str) -> None:
    """Before training: the split's two files exist and hold text (field names the recipe's setting)."""
    if not prefix:
        raise ValueError(f"{field} is not set: give it in the recipe (recipes/*.yaml) or as --{field}=PREFIX")
    paths = []
    for lang in (src_lang, tgt_lang):
        try:
            paths.append(find_file(prefix, lang))
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{field}: {err}") from None
    for path in paths:
        with open_bytes(path) as f:
            if not f.read(1):
                raise ValueError(f"{path}: empty file ({field}); there are no sentence pairs")


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    """Source and target lines, which must pair up one to one."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if not src and not tgt:
        raise ValueError(f"{src_path}, {tgt_path}: both files are empty; there are no sentence pairs")
    if len(src) != len(tgt):
        short, long_ = (src_path, tgt_path) if len(src) < len(tgt) else (tgt_path, src_path)
        n = min(len(src), len(tgt))
        raise ValueError(
            f"{long_}:{n + 1}: line has no partner: {short} ends after line {n} "
            f"({len(src)} source lines, {len(tgt)} target lines)"
        )
    return src, tgt


@dataclass
class FilterReport:
    """What length filtering dropped, and why."""

    kept: int = 0
    empty: int = 0  # a side with no subwords
    too_long: int = 0  # a side longer than max_subwords
    examples: list[int] = field(default_factory=list)  # first dropped line numbers (1-based)

    def __str__(self) -> str:
        dropped = self.empty + self.too_long
        text = f"kept {self.kept:,} pairs, dropped {dropped:,} ({self.empty:,} empty, {self.too_long:,} longer than the limit)"
        return text + (f"; first dropped lines: {self.examples}" if self.examples else "")


@dataclass
class EncodedCorpus:
    """Subword ids of kept pairs, each ending in </s>, and the original line numbers."""

    src: list[list[int]]
    tgt: list[list[int]]
    lines: list[int]  # 1-based line number in the files of each kept pair

    def __len__(self) -> int:
        return len(self.src)

    def save(self, path: Path, key: str) -> None:
        """Write the cache: safetensors (flat int32 ids and offsets), then a JSON sidecar, both atomically.

        The sidecar, written last, holds the cache's length and SHA-256 and the key it was built for
        (source files, vocabulary, filter): `load` rebuilds a cache that a kill left half written.
        """
        from safetensors.torch import save

        from .. import faults
        from ..weights import write_atomic

        data = save(
            {**_flat("src", self.src), **_flat("tgt", self.tgt), "lines": torch.tensor(self.lines, dtype=torch.int64)},
            metadata={"key": key},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, fault="cache")
        faults.point("cache.before-sidecar")
        sidecar = {"key": key, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        write_atomic(_sidecar(path), json.dumps(sidecar).encode())

    @classmethod
    def load(cls, path: Path, key: str) -> EncodedCorpus | None:
        """The cache at path if it is whole and was built for key; None (rebuild it) otherwise."""
        from safetensors.torch import load

        try:
            sidecar = json.loads(_sidecar(path).read_text())
            data = path.read_bytes()
        except (OSError, ValueError):
            return None
        if not isinstance(sidecar, dict) or sidecar.get("key") != key or sidecar.get("bytes") != len(data):
            return None
        if sidecar.get("sha256") != hashlib.sha256(data).hexdigest():
            return None
        d = load(data)
        return cls(_unflat("src", d), _unflat("tgt", d), d["lines"].tolist())


def cache_key(src_path: Path, tgt_path: Path, tokenizer, max_subwords: int) -> str:
    """What an encoded cache depends on: the files (path, size, time), the tokenizer's models, the filter."""
    files = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in (src_path, tgt_path)]
    protos = [
        getattr(tokenizer, name) for name in ("proto", "source_proto", "target_proto") if hasattr(tokenizer, name)
    ]
    tokens = hashlib.sha256(b"".join(protos) or repr(tokenizer).encode()).hexdigest()
    return hashlib.sha256(json.dumps([files, tokens, max_subwords]).encode()).hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _flat(name: str, rows: list[list[int]]) -> dict[str, torch.Tensor]:
    """Ragged rows as one int32 vector and the offsets where each row starts (and the last ends)."""
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.tensor([len(r) for r in rows], dtype=torch.int64).cumsum(0)
    flat = torch.tensor([i for r in rows for i in r], dtype=torch.int32)
    return {name: flat, f"{name}_offsets": offsets}


def _unflat(name: str, d: dict[str, torch.Tensor]) -> list[list[int]]:
    flat, offsets = d[name].tolist(), d[f"{name}_offsets"].tolist()
    return [flat[a:b] for a, b in zip(offsets, offsets[1:])]


def encode_pairs(
    src: list[str], tgt: list[str], encode_source: EncodeFn, encode_target: EncodeFn, max_subwords: int
) -> tuple[EncodedCorpus, FilterReport]:
    """Encode and drop pairs with an empty side or a side over max_subwords (</s> included)."""
    src_ids, tgt_ids = encode_source(src), encode_target(tgt)
    corpus, report = EncodedCorpus([], [], []), FilterReport()
    for number, (s, t, s_text, t_text) in enumerate(zip(src_ids, tgt_ids, src, tgt), start=1):
        if not s_text.strip() or not t_text.strip():
            report.empty += 1
        elif len(s) > max_subwords or len(t) > max_subwords:
            report.too_long += 1
        else:
            corpus.src.append(s)
            corpus.tgt.append(t)
            corpus.lines.append(number)
            continue
        if len(report.examples) < 5:
            report.examples.append(number)
    report.kept = len(corpus)
    if not corpus:
        why = f"data.max_subwords is {max_subwords}" if report.too_long else "every pair has an empty side"
        raise ValueError(f"no sentence pair is left after filtering ({why}): {report}")
    return corpus, report
