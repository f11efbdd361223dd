"""Parallel text the way users have it, read as a stream of chunks (§5.1's sentence pairs).

A recipe's `data.train`, `data.valid` or `data.test` names one of:

    ../data/wmt14/train                      two files, train.en and train.de (each may end in .gz)
    ../data/wmt14/train.tsv                  one tab-separated file (.tsv or .tsv.gz): source column first,
                                             unless a header row names the languages (en<TAB>de)
    ../data/wmt14/train.jsonl                JSON Lines (.jsonl or .jsonl.gz): {"en": ..., "de": ...}
                                             or Hugging Face's {"translation": {"en": ..., "de": ...}}
    {dataset: wmt14, config: de-en, split: train}
                                             a Hugging Face `datasets` dataset: a folder written by
                                             save_to_disk, or a name that `load_dataset` resolves (from its
                                             local cache when HF_DATASETS_OFFLINE=1)

Every form is read strictly: a line without a partner, bytes that are not UTF-8, a row without a
language, stop with an error naming the file and line (or the dataset and row). Nothing is skipped here;
the length filter (aiayn.data.store) counts what it drops.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from zlib import error as ZlibError

CHUNK = 20_000  # pairs a chunk: what one encoding worker takes at a time
DATASET_KEYS = ("dataset", "config", "split")


@dataclass(frozen=True)
class Chunk:
    """Pairs on consecutive lines (or rows) of a source; `first` is the line number, from 1, of the first."""

    first: int
    src: list[str]
    tgt: list[str]


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


def text_lines(path: str | Path) -> Iterator[str]:
    """The lines of a plain or gzip UTF-8 file, one at a time, without their line ends (nor a byte order mark
    before the first)."""
    with open_bytes(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = raw[err.start : err.start + 1]
                raise ValueError(f"{path}:{number}: not valid UTF-8 (byte {err.start}: {bad!r})") from None
            yield (line.removeprefix("\ufeff") if number == 1 else line).rstrip("\r\n")


def read_lines(path: str | Path) -> list[str]:
    """Every line of a plain or gzip UTF-8 file (see text_lines)."""
    return list(text_lines(path))


class Source:
    """Where a split's pairs are; `chunks()` streams them, `files()` names what they are read from."""

    def __init__(self, spec: str | os.PathLike | dict, src_lang: str, tgt_lang: str, field: str = "data"):
        spec = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
        self.spec, self.src_lang, self.tgt_lang, self.field = spec, src_lang, tgt_lang, field
        check_spec(spec, field)
        if isinstance(spec, dict):
            self.kind = "dataset"
        else:
            name = spec.removesuffix(".gz")
            self.kind = "tsv" if name.endswith(".tsv") else "jsonl" if name.endswith(".jsonl") else "files"

    def __str__(self) -> str:
        if self.kind == "files":
            return " / ".join(map(str, self.files()))
        if self.kind == "dataset":
            return "dataset " + ", ".join(f"{k} {v}" for k, v in self.spec.items())
        return str(self.spec)

    def files(self) -> list[Path]:
        """The files the pairs come from (a dataset's Arrow files), for the store's key; FileNotFoundError naming the
        recipe's field when they are missing."""
        try:
            if self.kind == "files":
                return [find_file(self.spec, self.src_lang), find_file(self.spec, self.tgt_lang)]
            if self.kind == "dataset":
                return [Path(f["filename"]) for f in self._dataset().cache_files]
            if not Path(self.spec).is_file():
                raise FileNotFoundError(f"no file {self.spec}")
            return [Path(self.spec)]
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{self.field}: {err}") from None

    def check(self) -> None:
        """Before training: the files exist and hold text. A dataset is checked when it is read (by rank 0 alone
        under torchrun), not here, where every rank would load it."""
        if self.kind == "dataset":
            return
        for path in self.files():
            with open_bytes(path) as f:
                if not f.read(1):
                    raise ValueError(f"{path}: empty file ({self.field}); there are no sentence pairs")

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        """The pairs in order, `size` at a time; the whole text is never held."""
        pairs = {"files": self._file_pairs, "tsv": self._tsv_pairs, "jsonl": self._jsonl_pairs}.get(self.kind)
        if pairs is None:
            yield from self._dataset_chunks(size)
            return
        first, src, tgt = 0, [], []
        for number, s, t in pairs():  # numbered by line: a TSV's header row is line 1, its first pair line 2
            if not src:
                first = number
            src.append(s)
            tgt.append(t)
            if len(src) == size:
                yield Chunk(first, src, tgt)
                src, tgt = [], []
        if src:
            yield Chunk(first, src, tgt)

    def read(self) -> tuple[list[str], list[str]]:
        """Every pair, as (sources, targets): for the validation and test sets, which are small."""
        src, tgt = [], []
        for chunk in self.chunks():
            src += chunk.src
            tgt += chunk.tgt
        if not src:
            raise ValueError(f"{self}: there are no sentence pairs")
        return src, tgt

    def sentences(self) -> Iterator[str]:
        """Every source sentence, then every target sentence, streamed in two passes (what the shared vocabulary
        samples)."""
        for side in ("src", "tgt"):
            for chunk in self.chunks():
                yield from getattr(chunk, side)

    # -- the forms

    def _file_pairs(self) -> Iterator[tuple[int, str, str]]:
        src_path, tgt_path = self.files()
        n_src = n_tgt = 0
        src_lines, tgt_lines = text_lines(src_path), text_lines(tgt_path)
        for s in src_lines:
            n_src += 1
            t = next(tgt_lines, None)
            if t is None:
                n_src += sum(1 for _ in src_lines)
                self._unpartnered(n_src, n_tgt)
            n_tgt += 1
            yield n_src, s, t
        n_tgt += sum(1 for _ in tgt_lines)
        if n_src != n_tgt:
            self._unpartnered(n_src, n_tgt)
        if n_src == 0:
            raise ValueError(f"{src_path}, {tgt_path}: both files are empty; there are no sentence pairs")

    def _unpartnered(self, n_src: int, n_tgt: int) -> None:
        src_path, tgt_path = self.files()
        short, long_ = (src_path, tgt_path) if n_src < n_tgt else (tgt_path, src_path)
        n = min(n_src, n_tgt)
        raise ValueError(
            f"{long_}:{n + 1}: line has no partner: {short} ends after line {n} "
            f"({n_src} source lines, {n_tgt} target lines)"
        )

    def _tsv_pairs(self) -> Iterator[tuple[int, str, str]]:
        path = self.spec
        columns, width = (0, 1), 2
        for number, line in enumerate(text_lines(path), start=1):
            fields = line.split("\t")
            if number == 1 and {self.src_lang, self.tgt_lang} <= set(fields):  # a header row naming the languages
                columns, width = (fields.index(self.src_lang), fields.index(self.tgt_lang)), len(fields)
                continue
            if len(fields) != width:
                raise ValueError(
                    f"{path}:{number}: {len(fields)} tab-separated field(s) where {width} are expected "
                    f"(source, target; or a first row naming the columns {self.src_lang} and {self.tgt_lang})"
                )
            yield number, fields[columns[0]], fields[columns[1]]

    def _jsonl_pairs(self) -> Iterator[tuple[int, str, str]]:
        path = self.spec
        for number, line in enumerate(text_lines(path), start=1):
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{path}:{number}: not a JSON object ({err})") from None
            yield number, *self._pair(row, f"{path}:{number}")

    def _pair(self, row: Any, where: str) -> tuple[str, str]:
        """(source, target) of a row {lang: text, ...} or {"translation": {lang: text, ...}}."""
        if isinstance(row, dict) and isinstance(row.get("translation"), dict):
            row = row["translation"]
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object with the keys {self.src_lang!r} and {self.tgt_lang!r}")
        pair = []
        for lang in (self.src_lang, self.tgt_lang):
            text = row.get(lang)
            if not isinstance(text, str):
                what = "no key" if lang not in row else f"{type(text).__name__}, not a string, at"
                raise ValueError(f"{where}: {what} {lang!r} (keys: {', '.join(map(repr, row)) or 'none'})")
            pair.append(text)
        return pair[0], pair[1]

    def _dataset(self):
        """The Hugging Face dataset: a save_to_disk folder, or load_dataset's (its cache when offline)."""
        import datasets

        spec = self.spec
        try:
            if Path(spec["dataset"]).is_dir() and (
                (Path(spec["dataset"]) / "dataset_info.json").is_file()
                or (Path(spec["dataset"]) / "dataset_dict.json").is_file()
            ):
                data = datasets.load_from_disk(spec["dataset"])
                if isinstance(data, datasets.DatasetDict):
                    if "split" not in spec:
                        raise ValueError(f"{self.field}: the dataset has splits {list(data)}; name one with split:")
                    if spec["split"] not in data:
                        raise ValueError(f"{self.field}: no split {spec['split']!r}; the splits are {list(data)}")
                    data = data[spec["split"]]
                return data
            return datasets.load_dataset(spec["dataset"], spec.get("config"), split=spec.get("split", "train"))
        except (FileNotFoundError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as err:
            offline = os.environ.get("HF_DATASETS_OFFLINE", "0") not in ("0", "", "false")
            how = (
                "it is not in the local cache and HF_DATASETS_OFFLINE is set: fetch it once online with "
                f"datasets.load_dataset({spec['dataset']!r}, {spec.get('config')!r})"
                if offline
                else str(err).splitlines()[0]
            )
            raise FileNotFoundError(f"{self.field}: dataset {spec['dataset']!r}: {how}") from None

    def _dataset_chunks(self, size: int) -> Iterator[Chunk]:
        data = self._dataset()
        name = f"dataset {self.spec['dataset']}"
        for first in range(0, len(data), size):
            rows = data[first : first + size]  # columns: {name: [values]}
            if "translation" in rows:
                rows = [{"translation": t} for t in rows["translation"]]
            else:
                rows = [dict(zip(rows, values)) for values in zip(*rows.values())]
            pairs = [self._pair(row, f"{name}, row {first + i + 1}") for i, row in enumerate(rows)]
            yield Chunk(first + 1, [s for s, _ in pairs], [t for _, t in pairs])
        if len(data) == 0:
            raise ValueError(f"{self.field}: {name} has no rows")


def check_spec(spec: Any, field: str) -> None:
    """A recipe's source: a non-empty path, or a mapping {dataset, config?, split?} of strings."""
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(DATASET_KEYS))
        if unknown or "dataset" not in spec:
            raise ValueError(
                f"{field}: a dataset is given as {{dataset: NAME or FOLDER, config: ..., split: ...}}"
                + (f"; unknown key {unknown[0]!r}" if unknown else "; dataset is missing")
            )
        bad = [k for k, v in spec.items() if not isinstance(v, str) or not v]
        if bad:
            raise ValueError(f"{field}.{bad[0]}: expected a non-empty string, got {spec[bad[0]]!r}")
    elif not isinstance(spec, str) or not spec:
        raise ValueError(f"{field} is not set: give it in the recipe (recipes/*.yaml) or as --{field}=PREFIX")
