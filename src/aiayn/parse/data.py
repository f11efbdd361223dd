"""The treebank as training data (§6.3): what aiayn.train.loop reads when a recipe says `format: ptb`
(aiayn.train.parsing builds the tokenizer and the model, and parses the test set at the end).

    data:
      format: ptb
      archive: ../shared/data/ptb-sample/treebank.zip
      train: wsj_0001-0159      # ranges of .mrg files instead of file prefixes
      valid: wsj_0160-0179
      test: wsj_0180-0199
      silver: runs/silver/multi30k.trees.gz   # optional: trees parsed automatically, one a line (parse/silver.py)
      silver_trees: 20000                     # the first N of them (0: all)
      gold_copies: 2                          # the gold training trees, repeated to keep their share

Sources are the words, targets the linearised trees; the tokenizer (OUT/parse-source.spm or, with
`source_units: words`, OUT/parse-words.json, and OUT/parse-target.json) is built once from the
training trees and read back on resume. The constrained search's tables in OUT/parse-target.json (the
tags each word takes, the shapes of the trees) read the gold trees alone, each once (`gold_pairs`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..data.sources import CHUNK, Chunk
from ..recipe import DataConfig
from .linearize import linearize
from .trees import Tree, read_treebank


def read_split(data: DataConfig, files: str) -> tuple[list[str], list[str]]:
    """(sentences, bracket sequences) of the trees in a file range, one pair per tree; the training range with its
    silver trees (`training_trees`)."""
    return pairs(training_trees(data) if files == data.train else read_treebank(data.archive, files))


def gold_pairs(data: DataConfig) -> tuple[list[str], list[str]]:
    """The gold training trees' pairs, each tree once: what the constrained search's tables are read from. Silver
    trees are another parser's guesses, and would widen the tags and shapes the search allows; repeated gold trees
    would make every gold word look frequent, leaving a rare word without its class's tags (parse/lexicon.py)."""
    return pairs(read_treebank(data.archive, data.train))


def pairs(trees: list[Tree]) -> tuple[list[str], list[str]]:
    """(sentences, bracket sequences), one pair per tree."""
    return sentences(trees), [" ".join(linearize(t)) for t in trees]


def training_trees(data: DataConfig) -> list[Tree]:
    """The gold training trees gold_copies times, then the first silver_trees trees of data.silver (§6.3's
    semi-supervised setting; none without it)."""
    from .silver import read_trees

    gold = read_treebank(data.archive, data.train) * data.gold_copies
    if not data.silver:
        return gold
    silver = read_trees(data.silver, data.silver_trees)
    if data.silver_trees and len(silver) < data.silver_trees:
        raise ValueError(f"data.silver_trees {data.silver_trees:,}: {data.silver} holds {len(silver):,} trees")
    return gold + silver


def sentences(trees: list[Tree]) -> list[str]:
    return [" ".join(t.words()) for t in trees]


class TreebankSource:
    """A file range of the treebank read as aiayn.data.sources.Source is: what the token store encodes."""

    kind = "ptb"

    def __init__(self, data: DataConfig, files: str):
        self.data, self.range = data, files
        self.spec = str(self)  # what the token store's key reads: the silver trees' share changes it

    def __str__(self) -> str:
        d = self.data
        if self.range != d.train or not (d.silver or d.gold_copies != 1):
            return f"{d.archive}: {self.range}"
        silver = f" + {d.silver_trees or 'all'} trees of {d.silver}" if d.silver else ""
        return f"{d.archive}: {self.range} x {d.gold_copies}{silver}"

    def files(self) -> list[Path]:
        silver = self.range == self.data.train and self.data.silver
        return [Path(self.data.archive)] + ([Path(self.data.silver)] if silver else [])

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        src, tgt = read_split(self.data, self.range)
        for first in range(0, len(src), size):
            yield Chunk(first + 1, src[first : first + size], tgt[first : first + size])
