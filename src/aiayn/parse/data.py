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

from ..recipe import DataConfig
from .linearize import linearize
from .trees import Tree, read_treebank


def read_split(data: DataConfig, files: str) -> tuple[list[str], list[str]]:
    """(sentences, bracket sequences) of the trees in a file range, one pair per tree."""
    trees = read_treebank(data.archive, files)
    return sentences(trees), [" ".join(linearize(t)) for t in trees]


def sentences(trees: list[Tree]) -> list[str]:
    return [" ".join(t.words()) for t in trees]
