"""Silver trees for §6.3's semi-supervised setting: unlabelled English parsed by the best classical parser here.

The paper's semi-supervised rows add about 17M sentences parsed automatically to the WSJ trees. Here the
unlabelled text is a file of sentences (the Multi30k English side), tokenised as the treebank is (NLTK's Penn
Treebank tokenizer: "ca n't", `` '', brackets as -LRB- / -RRB-), and parsed by the PCFG of aiayn.parse.pcfg
trained on the gold training trees. The result, one tree a line, is what a recipe's `data.silver` reads.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..data.sources import text_lines
from .pcfg import PCFG
from .trees import Tree, TreeError, parse_tree

Log = Callable[[str], None]


class SilverReport(NamedTuple):
    chosen: int  # sentences drawn from the text
    parsed: int  # written as trees
    empty: int  # nothing left after tokenising
    too_long: int  # more words than the limit
    no_parse: int  # the grammar has no tree for them


def ptb_tokens(sentence: str) -> list[str]:
    """The sentence tokenised as the Penn Treebank is, brackets escaped (-LRB-, -RRB-, -LSB-, ...)."""
    try:
        from nltk.tokenize import TreebankWordTokenizer
    except ImportError:
        raise ImportError(
            "silver trees tokenise with NLTK's Penn Treebank tokenizer: pip install 'aiayn[parse]'"
        ) from None

    return TreebankWordTokenizer().tokenize(sentence, convert_parentheses=True)


def choose(count: int, n: int, seed: int) -> list[int]:
    """n line numbers (0-based) of count drawn with the seed, in file order; all of them when n is 0 or more."""
    if not n or n >= count:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), n))


def make_silver(
    grammar: PCFG, text: str | Path, n: int = 0, seed: int = 1, max_words: int = 40, log: Log = print
) -> tuple[list[Tree], SilverReport]:
    """Parse n sentences of a text file (drawn with the seed; 0: every one) with the grammar: the trees, and what
    was left out and why. The same grammar, text, n and seed give the same trees."""
    lines = list(text_lines(text))
    picked = choose(len(lines), n, seed)
    trees, empty, too_long, no_parse = [], 0, 0, 0
    for done, i in enumerate(picked, start=1):
        words = ptb_tokens(lines[i])
        if not words:
            empty += 1
        elif len(words) > max_words:
            too_long += 1
        elif (tree := grammar.parse(words)) is None:
            no_parse += 1
        else:
            trees.append(tree)
        if done % 2000 == 0:
            log(f"{text}: {done:,} of {len(picked):,} sentences parsed")
    return trees, SilverReport(len(picked), len(trees), empty, too_long, no_parse)


def write_trees(path: str | Path, trees: list[Tree]) -> None:
    """One tree a line, gzip where the name ends in .gz; written whole or not at all."""
    from ..weights import write_atomic

    data = "".join(f"{t}\n" for t in trees).encode()
    write_atomic(Path(path), gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)


def read_trees(path: str | Path, limit: int = 0) -> list[Tree]:
    """The first `limit` trees (0: all) of a file of one tree a line (plain or .gz); a line that is not one tree is
    an error naming it."""
    trees = []
    for number, line in enumerate(text_lines(path), start=1):
        if limit and len(trees) == limit:
            break
        if not line.strip():
            raise ValueError(f"{path}:{number}: an empty line (one tree a line)")
        try:
            trees.append(parse_tree(line, f"{path}:{number}"))
        except TreeError as err:
            raise ValueError(str(err)) from None
    if not trees:
        raise ValueError(f"{path}: no trees")
    return trees
