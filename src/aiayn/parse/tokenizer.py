"""The parser's tokenizer (§6.3): subwords or whole words for the sentence, whole symbols for the trees.

A target symbol is an opening bracket "(NP", a closing one ")NP" or a POS tag, and must stay one
token: the target side has its own vocabulary (the model is built with tgt_vocab_size and
share_embeddings=False). The source is SentencePiece subwords, or (`data.source_units: words`)
whole words as in the work §6.3 follows (Vinyals et al. 2015 kept the most frequent words): then
source position k is word k, whose tag is the k-th tag of the target. Stored beside the model:

    DIR/parse-source.spm     the source SentencePiece model (ids 0-3: <pad> <s> </s> <unk>), or
    DIR/parse-words.json     {"words": [...]}, the source words and unknown-word classes in id order
    DIR/parse-target.json    {"symbols": [...], "shape": {...}, "lexicon": {...}}, the target vocabulary
                             in id order (the same 0-3), the gold training trees' bounds
                             (aiayn.parse.constrain.TreeShape) and the tags each of their words took
                             (aiayn.parse.lexicon.TagLexicon); older files have neither or no lexicon
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ..data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from .constrain import TreeShape
from .lexicon import TagLexicon
from .pcfg import signature, signature_backoffs

SOURCE_FILE, WORDS_FILE, TARGET_FILE = "parse-source.spm", "parse-words.json", "parse-target.json"
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # ids PAD_ID, BOS_ID, EOS_ID, UNK_ID


class WordVocab:
    """Whole words as source ids: the training words seen at least twice (the most frequent first, up
    to the vocabulary's size), and for any other word its shape class (capitalised, digit, hyphen,
    suffix: aiayn.parse.pcfg.signature), learnt from the words seen once. Vocab's interface."""

    def __init__(self, words: list[str]):
        if tuple(words[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"the source words must start with {', '.join(SPECIALS)}")
        self.words = list(words)
        self.ids = {w: i for i, w in enumerate(self.words) if i >= len(SPECIALS)}  # "<s>" typed in is a word

    @classmethod
    def train(cls, sentences: list[str], size: int, min_count: int = 2) -> WordVocab:
        counts = Counter(w for s in sentences for w in s.split())
        classes = sorted({signature(w) for w in counts})  # every class a training word falls in
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        return cls([*SPECIALS, *classes, *kept[: max(size - len(SPECIALS) - len(classes), 0)]])

    def __len__(self) -> int:
        return len(self.words)

    @property
    def proto(self) -> bytes:
        return json.dumps({"words": self.words}).encode()

    def encode_batch(self, texts: list[str], add_eos: bool = True) -> list[list[int]]:
        out = [[self.ids.get(w) or self.unknown(w) for w in text.split()] for text in texts]
        return [x + [EOS_ID] for x in out] if add_eos else out

    def unknown(self, word: str) -> int:
        """The id of an unknown word's class, dropping its last feature while training never saw the class."""
        return next((self.ids[c] for c in signature_backoffs(word) if c in self.ids), UNK_ID)

    @classmethod
    def load(cls, path: Path) -> WordVocab:
        try:
            words = json.loads(path.read_text(encoding="utf-8"))["words"]
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise TypeError("expected a list of strings")
            return cls(words)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a source word list ({err})") from None


def split(sequences: Iterable[str]) -> list[list[str]]:
    """Bracket sequences, symbols separated by spaces -> lists of symbols."""
    return [seq.split() for seq in sequences]


class ParseTokenizer:
    """Words -> subword ids (source); bracket sequences <-> symbol ids (target)."""

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(
        self,
        source: Vocab | WordVocab,
        symbols: list[str],
        shape: TreeShape = TreeShape(),
        lexicon: TagLexicon = TagLexicon(),
    ):
        if tuple(symbols[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"the target vocabulary must start with {', '.join(SPECIALS)}")
        self.source, self.symbols, self.shape, self.lexicon = source, list(symbols), shape, lexicon
        self.ids = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def train(
        cls,
        sentences: list[str],
        sequences: Iterable[str],
        vocab_size: int,
        units: str = "subwords",
        tables: tuple[list[str], Iterable[str]] | None = None,
    ) -> ParseTokenizer:
        """A source vocabulary of vocab_size BPE pieces (or words) on the sentences; every target symbol seen, by
        frequency; the constrained search's shape and tag tables read from `tables`, (sentences, sequences) of the
        trees that bound the search (by default the same pairs)."""
        sequences = split(sequences)
        counts = Counter(s for seq in sequences for s in seq)
        source = WordVocab.train(sentences, vocab_size) if units == "words" else Vocab.train(sentences, vocab_size)
        bound, bound_sequences = (sentences, sequences) if tables is None else (tables[0], split(tables[1]))
        return cls(
            source,
            [*SPECIALS, *sorted(counts, key=lambda s: (-counts[s], s))],
            TreeShape.of(bound_sequences),
            TagLexicon.of(bound, bound_sequences),
        )

    @property
    def source_proto(self) -> bytes:  # what training's cache key hashes (aiayn.data.store.store_key)
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
        source = WORDS_FILE if isinstance(self.source, WordVocab) else SOURCE_FILE
        target = {"symbols": self.symbols, "shape": self.shape.to_json()}
        if self.lexicon.words:  # a tokenizer read from an older file keeps that file's bytes (training's cache key)
            target["lexicon"] = self.lexicon.to_json()
        return {source: self.source.proto, TARGET_FILE: json.dumps(target).encode()}

    def save(self, directory: str | Path) -> None:
        from ..weights import write_atomic

        for name, data in self.files().items():
            write_atomic(Path(directory) / name, data)

    @classmethod
    def load(cls, directory: str | Path) -> ParseTokenizer:
        directory = Path(directory)
        if not (directory / TARGET_FILE).is_file():
            raise FileNotFoundError(f"{directory}: no {TARGET_FILE}; not a parsing model directory")
        if not (directory / SOURCE_FILE).is_file() and not (directory / WORDS_FILE).is_file():
            raise FileNotFoundError(f"{directory}: no {SOURCE_FILE} or {WORDS_FILE}; not a parsing model directory")
        try:
            target = json.loads((directory / TARGET_FILE).read_text(encoding="utf-8"))
            symbols = target["symbols"]
            shape = TreeShape.from_json(target.get("shape", {}))  # older files: none, or no edge tags
            lexicon = TagLexicon.from_json(target.get("lexicon", {}))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{directory / TARGET_FILE}: not a target vocabulary ({err})") from None
        words = directory / WORDS_FILE
        return cls(
            WordVocab.load(words) if words.is_file() else Vocab.load(directory / SOURCE_FILE), symbols, shape, lexicon
        )

    @staticmethod
    def is_saved_in(directory: str | Path) -> bool:
        return (Path(directory) / TARGET_FILE).is_file()
