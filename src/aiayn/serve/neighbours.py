"""A source token's nearest neighbours among the tokens of a reference text, by their encoder states (Seq2Seq-Vis).

The index holds the encoder stack's output z (§3.1) at every piece of a sample of the reference text's sentences,
each vector scaled to unit length, so that a query's nearest are its largest dot products (cosine similarity).
It is built once per served model, on the model thread, when first asked for, and lives as long as the server.

The reference text is the one `aiayn serve --neighbours [NAME=]FILE` names (source-language sentences, one a
line, plain or .gz), else, for a model trained by aiayn whose run folder is beside it (RUN/model), the source
side of that run's training data as its recipe names it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..data.sources import Source, text_lines
from ..translator import Translator

SAMPLE = 2000  # sentences drawn from the reference text (every one, when it has fewer)
BATCH = 64  # sentences a forward pass of the encoder
HOW = (
    "start the server with --neighbours FILE (source-language sentences, one a line), or serve a model trained by "
    "aiayn from its run folder (RUN/model), whose training text is then used"
)


@dataclass(frozen=True)
class Reference:
    """Where a model's reference sentences come from (what the page says) and how to read them."""

    name: str
    sentences: Callable[[], Iterator[str]]


def reference_for(folder: Path, given: Path | None) -> tuple[Reference | None, str]:
    """The reference text of the model in folder: the file given, else its run's training text; or None and why."""
    if given is not None:
        return Reference(str(given), lambda: text_lines(given)), ""
    record = folder.parent / "run.json"
    if not record.is_file():
        return None, f"no reference text: {HOW}"
    try:
        data = json.loads(record.read_text(encoding="utf-8"))["recipe"]["data"]
        source = Source(data["train"], data["src_lang"], data["tgt_lang"], field="data.train")
        source.files()  # the training text may have moved since the run
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, f"the run's training text cannot be read ({record}: {err}); {HOW}"
    return Reference(f"the training text of {folder.parent} ({source})", lambda: source_side(source)), ""


def source_side(source: Source) -> Iterator[str]:
    for chunk in source.chunks():
        yield from chunk.src


def sample_lines(lines: Iterable[str], n: int, seed: int = 0) -> tuple[list[str], int]:
    """n of the non-empty lines, drawn uniformly (reservoir sampling, so the text is never held whole) and kept in
    their order in the text; and how many non-empty lines there were."""
    rng, kept, seen = random.Random(seed), [], 0
    for line in lines:
        if not line.strip():
            continue
        if len(kept) < n:
            kept.append((seen, line))
        else:
            j = rng.randrange(seen + 1)
            if j < n:
                kept[j] = (seen, line)
        seen += 1
    return [line for _, line in sorted(kept)], seen


class NeighbourIndex:
    """Unit-length encoder states (N, D) of a reference sample's pieces, each with its sentence and position."""

    def __init__(
        self,
        name: str,
        sentences: list[str],
        pieces: list[list[str]],
        states: Tensor,
        owner: Tensor,
        lines: int,
        too_long: int,
        seconds: float,
    ):
        self.name, self.sentences, self.pieces, self.states, self.owner = name, sentences, pieces, states, owner
        self.lines, self.too_long, self.seconds = lines, too_long, seconds

    @classmethod
    def build(
        cls,
        translator: Translator,
        reference: Reference,
        pieces_of: Callable[[list[int]], list[str]],
        size: int = SAMPLE,
    ) -> NeighbourIndex:
        """Encode a sample of the reference text with translator's model; sentences longer than the model takes are
        left out and counted."""
        start = time.perf_counter()
        sample, lines = sample_lines(reference.sentences(), size)
        if not sample:
            raise ValueError(f"{reference.name}: no sentences")
        ids = translator.tokenizer.encode_source(sample)
        keep = [i for i, seq in enumerate(ids) if len(seq) <= translator.max_source_len]
        sentences, ids = [sample[i] for i in keep], [ids[i] for i in keep]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # batches of like lengths: little padding
        states: list[Tensor] = []
        owner: list[Tensor] = []
        for first in range(0, len(order), BATCH):
            batch = order[first : first + BATCH]
            z = encode(translator, [ids[i] for i in batch])  # (B, S, D)
            for row, i in enumerate(batch):
                n = len(ids[i]) - 1  # every piece but </s>
                states.append(z[row, :n])
                owner.append(torch.stack([torch.full((n,), i), torch.arange(n)], dim=1))
        table = torch.nn.functional.normalize(torch.cat(states).float(), dim=-1)
        pieces = [pieces_of(seq) for seq in ids]
        return cls(
            reference.name,
            sentences,
            pieces,
            table,
            torch.cat(owner),
            lines,
            len(sample) - len(keep),
            time.perf_counter() - start,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.name,
            "lines": self.lines,
            "sentences": len(self.sentences),
            "tokens": int(self.states.shape[0]),
            "too_long": self.too_long,
            "build_seconds": round(self.seconds, 2),
        }

    def nearest(self, query: Tensor, k: int) -> list[dict[str, Any]]:
        """The k pieces whose states are nearest query (D,), nearest first, each in its sentence."""
        similarity = self.states @ torch.nn.functional.normalize(query.float(), dim=-1)  # (N,)
        top = similarity.topk(min(k, similarity.numel()))
        found = []
        for value, row in zip(top.values.tolist(), top.indices.tolist()):
            sentence, position = self.owner[row].tolist()
            found.append(
                {
                    "sentence": self.sentences[sentence],
                    "tokens": self.pieces[sentence],
                    "position": position,
                    "token": self.pieces[sentence][position],
                    "similarity": value,
                }
            )
        return found


def encode(translator: Translator, seqs: list[list[int]]) -> Tensor:
    """The encoder's output z (B, S, D) for source id sequences, padded."""
    pad = translator.model.config.pad_id
    width = max(len(s) for s in seqs)
    src = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=translator.device)
    with torch.inference_mode():
        return translator.model.encode(src)[0].cpu()
