"""A shared SentencePiece BPE vocabulary for source and target (§5.1), stored with the model."""

from __future__ import annotations

import functools
import io
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import sentencepiece as spm

# Special ids, fixed so that ModelConfig's defaults (pad 0, bos 1, eos 2, unk 3) hold for every vocabulary.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SEED = 1  # SentencePiece's sampling of training sentences


def read_sentencepiece(model_proto: bytes, where: str) -> spm.SentencePieceProcessor:
    """A SentencePiece model from its bytes; a file that is not one is an error naming it."""
    try:
        return spm.SentencePieceProcessor(model_proto=model_proto)
    except RuntimeError:  # SentencePiece's own message is a line of C++ source
        raise ValueError(f"{where}: not a SentencePiece model ({len(model_proto):,} bytes that do not parse)") from None


def sample_sentences(sentences: Iterable[str], k: int, seed: int = SEED) -> list[str]:
    """k sentences drawn uniformly from a stream of any length, holding only k (reservoir sampling, Vitter's
    algorithm R, with a seeded generator); every sentence, in order, when the stream has at most k."""
    rng = np.random.default_rng(seed)
    sample: list[str] = []
    stream = iter(sentences)
    sample.extend(itertools.islice(stream, k))
    seen = len(sample)
    while chunk := list(itertools.islice(stream, 65_536)):
        # sentence seen + i replaces sample[j] when j = uniform(0 .. seen + i) falls below k
        slots = (rng.random(len(chunk)) * np.arange(seen + 1, seen + len(chunk) + 1)).astype(np.int64)
        for i in np.flatnonzero(slots < k):
            sample[slots[i]] = chunk[i]
        seen += len(chunk)
    return sample


def _handed_over(sentences: list[str]) -> Iterator[str]:
    """The sentences in order, each let go of as SentencePiece takes its own copy: the sample is not held twice."""
    sentences.reverse()
    while sentences:
        yield sentences.pop()


def _clear_trainer_errors(train: Callable[..., Vocab]) -> Callable[..., Vocab]:
    """Vocab.train with its failures as one line naming data.vocab_size (SentencePiece's own are C++ source)."""

    @functools.wraps(train)
    def checked(cls, sentences: Iterable[str], vocab_size: int, *args, **kwargs) -> Vocab:
        if vocab_size < UNK_ID + 2:
            raise ValueError(
                f"data.vocab_size {vocab_size}: must be at least {UNK_ID + 2} (4 special tokens and a character)"
            )
        try:
            return train(cls, sentences, vocab_size, *args, **kwargs)
        except RuntimeError as err:
            raise ValueError(_trainer_error(str(err), vocab_size)) from None

    return checked


class Vocab:
    """Text <-> ids. Sources are encoded with a final </s>; decoding drops special tokens."""

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, model_proto: bytes, where: str = "vocabulary"):
        self.proto = model_proto
        self.sp = read_sentencepiece(model_proto, where)

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls(Path(path).read_bytes(), str(path))

    def save(self, path: str | Path) -> None:
        """Write the model whole or not at all (temporary file, fsync, rename)."""
        from ..weights import write_atomic

        write_atomic(Path(path), self.proto, fault="vocab")

    @classmethod
    @_clear_trainer_errors
    def train(cls, sentences: Iterable[str], vocab_size: int, seed_sentences: int = 2_000_000) -> Vocab:
        """Train BPE on the given sentences (source and target text together, for a shared vocabulary).

        Deterministic: the same sentences give the same model bytes (the sample of seed_sentences
        is drawn with a fixed seed), so a run killed while training its vocabulary reruns exactly.
        The sentences may be a stream of any length: only the sample is held.
        """
        sentences = sample_sentences(sentences, seed_sentences)
        if not any(s.strip() for s in sentences):
            raise ValueError("no text to train the vocabulary on: the training files have no non-empty line")
        out = io.BytesIO()
        spm.set_random_generator_seed(SEED)
        spm.SentencePieceTrainer.train(
            sentence_iterator=_handed_over(sentences),
            model_writer=out,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=1.0,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            input_sentence_size=seed_sentences,
            shuffle_input_sentence=True,
            num_threads=2,
            minloglevel=2,
        )
        return cls(out.getvalue())

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, add_eos: bool = True) -> list[int]:
        ids = self.sp.encode(text)
        return ids + [EOS_ID] if add_eos else ids

    def encode_batch(self, texts: list[str], add_eos: bool = True) -> list[list[int]]:
        batch = self.sp.encode(texts)
        return [ids + [EOS_ID] for ids in batch] if add_eos else batch

    # The Tokenizer interface that training and translation use; a Marian model has its own
    # (separate source and target SentencePiece models), with the same three methods.
    def encode_source(self, texts: list[str]) -> list[list[int]]:
        return self.encode_batch(texts)

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        return self.encode_batch(texts)

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; stops at the first </s> and skips pad and bos."""
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(int(i))
        return self.sp.decode(out)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]


def _trainer_error(message: str, vocab_size: int) -> str:
    """SentencePiece's trainer error (a line of C++ source and its check) as one line naming data.vocab_size."""
    if found := re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message):
        return (
            f"data.vocab_size {vocab_size:,} is more than the training text allows: "
            f"SentencePiece can make at most {int(found[2]):,} pieces from it"
        )
    if found := re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", message):
        return (
            f"data.vocab_size {vocab_size:,} is less than the training text needs: "
            f"at least {int(found[2]):,} pieces (each of its characters, and the special tokens)"
        )
    return f"SentencePiece could not train a vocabulary of {vocab_size:,} pieces: {message.splitlines()[0]}"
