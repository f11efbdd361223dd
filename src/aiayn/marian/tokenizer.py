"""The tokenizer of a Marian (opus-mt) directory: SentencePiece pieces looked up in vocab.json.

A released Marian model has two SentencePiece models (source.spm, target.spm) that only cut text
into pieces; the ids the model reads come from vocab.json (piece -> id), one table for both sides
unless the directory has separate vocabularies (target_vocab.json). Sentences end in </s>; the
decoder starts from <pad>. This is the same `encode_source / encode_target / decode` interface as
`aiayn.data.vocab.Vocab`, written to give the ids Hugging Face's MarianTokenizer gives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from ..data.vocab import read_sentencepiece

SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = "source.spm", "target.spm", "vocab.json", "target_vocab.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}


def read_json(path: Path) -> dict:
    """A JSON file, with an error that names it when it is missing or broken."""
    if not path.is_file():
        raise FileNotFoundError(f"{path.parent}: no {path.name}; not a Marian model directory")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, not {json.dumps(value)[:40]}")
    return value


def read_vocab(path: Path) -> dict[str, int]:
    """vocab.json: piece -> id, with </s>, <unk> and <pad> required."""
    vocab = read_json(path)
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ValueError(f"{path}: expected a JSON object of piece -> integer id")
    missing = [t for t in SPECIAL.values() if t not in vocab]
    if missing:
        raise ValueError(f"{path}: the vocabulary has no {', '.join(missing)}")
    if len(set(vocab.values())) != len(vocab):
        raise ValueError(f"{path}: two pieces share one id")
    return vocab


class MarianTokenizer:
    """Text <-> ids for a Marian model: source/target SentencePiece models and vocab.json ids."""

    def __init__(
        self,
        source_spm: bytes,
        target_spm: bytes,
        vocab: dict[str, int],
        target_vocab: dict[str, int] | None = None,
        where: dict[str, str] | None = None,
    ):
        where = where or {}  # file name -> its path, for errors
        self.source_sp = read_sentencepiece(source_spm, where.get(SOURCE_SPM, SOURCE_SPM))
        self.target_sp = read_sentencepiece(target_spm, where.get(TARGET_SPM, TARGET_SPM))
        self.source_proto, self.target_proto = source_spm, target_spm
        self.vocab = vocab
        self.target_vocab = target_vocab if target_vocab is not None else vocab
        self.id_to_piece = {i: p for p, i in self.target_vocab.items()}
        self.eos_id, self.unk_id, self.pad_id = (self.vocab[SPECIAL[k]] for k in ("eos", "unk", "pad"))
        self.target_eos_id, self.target_pad_id, self.target_unk_id = (
            self.target_vocab[SPECIAL[k]] for k in ("eos", "pad", "unk")
        )

    @classmethod
    def load(cls, directory: str | Path) -> MarianTokenizer:
        """source.spm, target.spm, vocab.json (and target_vocab.json when tokenizer_config says so)."""
        directory = Path(directory)
        for name in (SOURCE_SPM, TARGET_SPM):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"{directory}: no {name}; not a Marian model directory")
        target_vocab = None
        settings = read_json(directory / TOKENIZER_CONFIG) if (directory / TOKENIZER_CONFIG).is_file() else {}
        if settings.get("separate_vocabs"):
            target_vocab = read_vocab(directory / TARGET_VOCAB)
        return cls(
            (directory / SOURCE_SPM).read_bytes(),
            (directory / TARGET_SPM).read_bytes(),
            read_vocab(directory / VOCAB),
            target_vocab,
            {n: str(directory / n) for n in (SOURCE_SPM, TARGET_SPM)},
        )

    @property
    def separate_vocabs(self) -> bool:
        return self.target_vocab is not self.vocab

    def _encode(self, sp: spm.SentencePieceProcessor, vocab: dict[str, int], eos: int, text: str) -> list[int]:
        # A leading language code such as ">>fra<<" (multilingual models) is one token, not cut by spm.
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        unk = vocab[SPECIAL["unk"]]
        return [vocab.get(p, unk) for p in code + sp.encode(text, out_type=str)] + [eos]

    def encode_source(self, texts: list[str]) -> list[list[int]]:
        """Source sentences -> ids ending in </s> (source.spm pieces, vocab.json ids)."""
        return [self._encode(self.source_sp, self.vocab, self.eos_id, t) for t in texts]

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        """Target sentences -> ids ending in </s> (target.spm pieces), e.g. for fine-tuning."""
        return [self._encode(self.target_sp, self.target_vocab, self.target_eos_id, t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """Target ids -> text: stops at </s>; skips <pad> and <unk>, as Hugging Face's decode does."""
        pieces = []
        for i in ids:
            i = int(i)
            if i == self.target_eos_id:
                break
            if i in (self.target_pad_id, self.target_unk_id):
                continue
            if i not in self.id_to_piece:
                raise ValueError(f"id {i} is not in the target vocabulary ({len(self.id_to_piece)} pieces)")
            pieces.append(self.id_to_piece[i])
        return self.target_sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def __len__(self) -> int:
        return len(self.vocab)
