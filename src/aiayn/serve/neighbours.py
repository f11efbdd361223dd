"""A source token's nearest neighbours among the tokens of a reference text, by their encoder states (Seq2Seq-Vis).

The index holds the encoder stack's output z (§3.1) at every piece of a sample of the reference text's sentences,
each vector scaled to unit length, so that a query's nearest are its largest dot products (cosine similarity).
It is built once per served model when first asked for, and lives as long as the server: the text is read and
sampled off the model thread (a large text takes a while), then encoded on it.

The reference text is the one `aiayn serve --neighbours [NAME=]FILE` names (source-language sentences, one a
line, plain or .gz), else, for a model trained by aiayn whose run folder is beside it (RUN/model), the source
side of that run's training data as its recipe names it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..data.sources import Source, text_lines
from ..data.vocab import sample_sentences
from ..train.run_folder import previous_recipe
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

    def sample(self, size: int = SAMPLE) -> tuple[list[str], int]:
        """`size` of the text's non-empty lines drawn uniformly (reservoir sampling: the text is never held whole),
        and how many non-empty lines there were. Reads the whole text: run it off the model thread."""
        counted = [0]

        def lines() -> Iterator[str]:
            for line in self.sentences():
                if line.strip():
                    counted[0] += 1
                    yield line

        return sample_sentences(lines(), size, seed=0), counted[0]


def reference_for(folder: Path, given: Path | None) -> tuple[Reference | None, str]:
    """The reference text of the model in folder: the file given, else its run's training text; or None and why.
    Nothing is read here but the run's record (a dataset the recipe names is loaded only when the index is built)."""
    if given is not None:
        return Reference(str(given), lambda: text_lines(given)), ""
    run = folder.parent
    try:
        recipe = previous_recipe(run)
        if recipe is None:
            return None, f"no reference text: {HOW}"
        data = recipe["data"]
        spec = data["train"]
        if isinstance(spec, str) and not Path(spec).is_absolute():
            # a relative path names a file from where training ran: this folder, or the one that holds runs/
            spec = next((str(b / spec) for b in (Path.cwd(), run.parent.parent) if _found(b / spec, data)), spec)
        source = Source(spec, data["src_lang"], data["tgt_lang"], field="data.train")
        name = source.files()[0] if source.kind == "files" else source  # (a text that moved since the run: said)
    except Exception as err:  # noqa: BLE001  an unreadable record or a missing text: the view says why
        return None, f"the run's training text cannot be read ({run}: {err}); {HOW}"
    return Reference(f"the training text of {run} ({name})", lambda: source_side(source)), ""


def _found(prefix: Path, data: dict[str, Any]) -> bool:
    try:
        Source(str(prefix), data["src_lang"], data["tgt_lang"]).files()
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def source_side(source: Source) -> Iterator[str]:
    for chunk in source.chunks():
        yield from chunk.src


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
        name: str,
        sample: list[str],
        lines: int,
        pieces_of: Callable[[list[int]], list[str]],
    ) -> NeighbourIndex:
        """Encode the sentences sampled from the text `name` with translator's model (on the model thread);
        sentences longer than the model takes are left out and counted."""
        start = time.perf_counter()
        if not sample:
            raise ValueError(f"{name}: no sentences")
        ids = translator.tokenizer.encode_source(sample)
        keep = [i for i, seq in enumerate(ids) if len(seq) <= translator.max_source_len]
        if not keep:
            raise ValueError(f"all {len(sample)} sampled sentences are longer than the model takes")
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
            name,
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
