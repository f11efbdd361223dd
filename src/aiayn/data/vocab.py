"""A shared SentencePiece BPE vocabulary for source and target (§5.1), stored with the model."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

# Special ids, fixed so that ModelConfig's defaults (pad 0, bos 1, eos 2, unk 3) hold for every vocabulary.
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SEED = 1  # SentencePiece's sampling of training sentences


class Vocab:
    """Text <-> ids. Sources are encoded with a final </s>; decoding drops special tokens."""

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, model_proto: bytes):
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        """Write the model whole or not at all (temporary file, fsync, rename)."""
        from ..io import write_atomic

        write_atomic(Path(path), self.proto, fault="vocab")

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int, seed_sentences: int = 2_000_000) -> Vocab:
        """Train BPE on the given sentences (source and target text together, for a shared vocabulary).

        Deterministic: the same sentences give the same model bytes (the sample of seed_sentences
        is drawn with a fixed seed), so a run killed while training its vocabulary reruns exactly.
        """
        out = io.BytesIO()
        spm.set_random_generator_seed(SEED)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=out,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=1.0,
            pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
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
