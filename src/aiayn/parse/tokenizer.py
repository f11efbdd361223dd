"""The parser's tokenizer (§6.3): SentencePiece subwords for the words, whole symbols for the trees.

A target symbol is an opening bracket "(NP", a closing one ")NP" or a POS tag, and must stay one
token: the target side has its own vocabulary (the model is built with tgt_vocab_size and
share_embeddings=False). Stored beside the model as two files:

    DIR/parse-source.spm     the source SentencePiece model (ids 0-3: <pad> <s> </s> <unk>)
    DIR/parse-target.json    {"symbols": [...]}, the target vocabulary in id order (the same 0-3)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ..data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab

SOURCE_FILE, TARGET_FILE = "parse-source.spm", "parse-target.json"
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids PAD_ID, BOS_ID, EOS_ID, UNK_ID


class ParseTokenizer:
    """Words -> subword ids (source); bracket sequences <-> symbol ids (target)."""

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, source: Vocab, symbols: list[str]):
        if tuple(symbols[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"the target vocabulary must start with {', '.join(SPECIALS)}")
        self.source, self.symbols = source, list(symbols)
        self.ids = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def train(cls, sentences: list[str], sequences: Iterable[str], vocab_size: int) -> ParseTokenizer:
        """A source BPE model of vocab_size pieces on the sentences; every target symbol seen, by frequency."""
        counts = Counter(s for seq in sequences for s in seq.split())
        return cls(Vocab.train(sentences, vocab_size), [*SPECIALS, *sorted(counts, key=lambda s: (-counts[s], s))])

    @property
    def source_proto(self) -> bytes:  # what training's cache key hashes (aiayn.train.loop.tokenizer_digest)
        return self.source.proto

    @property
    def target_proto(self) -> bytes:
        return self.files()[TARGET_FILE]

    @property
    def target_size(self) -> int:
        return len(self.symbols)

    def __len__(self) -> int:  # the source vocabulary, as for Vocab
        return len(self.source)

    def encode_source(self, texts: list[str]) -> list[list[int]]:
        return self.source.encode_batch(texts)

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        """Bracket sequences (symbols separated by spaces) -> ids ending in </s>; unknown symbols -> <unk>."""
        return [[self.ids.get(s, UNK_ID) for s in text.split()] + [EOS_ID] for text in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """Target ids -> a bracket sequence; stops at </s>, skips <pad> and <s>, keeps <unk> (repair drops it)."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(self.symbols[i])
        return " ".join(out)

    def files(self) -> dict[str, bytes]:
        """File name -> contents, for saving beside a model."""
        return {SOURCE_FILE: self.source.proto, TARGET_FILE: json.dumps({"symbols": self.symbols}).encode()}

    def save(self, directory: str | Path) -> None:
        from ..io import write_atomic

        for name, data in self.files().items():
            write_atomic(Path(directory) / name, data)

    @classmethod
    def load(cls, directory: str | Path) -> ParseTokenizer:
        directory = Path(directory)
        for name in (SOURCE_FILE, TARGET_FILE):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"{directory}: no {name}; not a parsing model directory")
        try:
            symbols = json.loads((directory / TARGET_FILE).read_text(encoding="utf-8"))["symbols"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{directory / TARGET_FILE}: not a target vocabulary ({err})") from None
        return cls(Vocab.load(directory / SOURCE_FILE), symbols)

    @staticmethod
    def is_saved_in(directory: str | Path) -> bool:
        return (Path(directory) / TARGET_FILE).is_file()
