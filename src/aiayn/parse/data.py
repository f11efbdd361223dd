"""The treebank as training data (§6.3): what aiayn.train.loop reads when a recipe says `format: ptb`
(aiayn.train.parsing builds the tokenizer and the model, and parses the test set at the end).

    data:
      format: ptb
      archive: ../shared/data/ptb-sample/treebank.zip
      train: wsj_0001-0159      # ranges of .mrg files instead of file prefixes
      valid: wsj_0160-0179
      test: wsj_0180-0199

Sources are the words, targets the linearised trees; the tokenizer (OUT/parse-source.spm or, with
`source_units: words`, OUT/parse-words.json, and OUT/parse-target.json) is built once from the
training trees and read back on resume.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..data.sources import CHUNK, Chunk
from ..recipe import DataConfig
from .linearize import linearize
from .trees import Tree, read_treebank


def read_split(data: DataConfig, files: str) -> tuple[list[str], list[str]]:
    """(sentences, bracket sequences) of the trees in a file range, one pair per tree."""
    trees = read_treebank(data.archive, files)
    return sentences(trees), [" ".join(linearize(t)) for t in trees]


def sentences(trees: list[Tree]) -> list[str]:
    return [" ".join(t.words()) for t in trees]


class TreebankSource:
    """A file range of the treebank read as aiayn.data.sources.Source is: what the token store encodes."""

    kind = "ptb"

    def __init__(self, data: DataConfig, files: str):
        self.data, self.spec = data, files

    def __str__(self) -> str:
        return f"{self.data.archive}: {self.spec}"

    def files(self) -> list[Path]:
        return [Path(self.data.archive)]

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        src, tgt = read_split(self.data, self.spec)
        for first in range(0, len(src), size):
            yield Chunk(first + 1, src[first : first + size], tgt[first : first + size])
