"""aiayn silver: unlabelled English parsed by a treebank PCFG, one tree a line (§6.3's semi-supervised setting).

    aiayn silver --treebank ../shared/data/ptb-sample/treebank.zip --text ../shared/data/multi30k/train.en.gz \\
        --sentences 20000 --seed 1 --out runs/silver/multi30k.trees.gz

The grammar is trained on the treebank's training files with Klein and Manning's annotations (aiayn.parse.pcfg,
the settings chosen on the development files); the sentences are drawn with the seed, tokenised as the treebank
is, and parsed; the trees go to --out whole or not at all, for a recipe's data.silver.
"""

from __future__ import annotations

import argparse
import sys

from .options import at_least
from .paths import input_file, output_file, same_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--treebank", required=True, help="the treebank's zip or folder of .mrg files")
    parser.add_argument("--train", default="wsj_0001-0159", help="the grammar's training files (default wsj_0001-0159)")
    parser.add_argument("--text", required=True, type=input_file, help="English sentences, one a line (.gz too)")
    parser.add_argument("--out", required=True, type=output_file, help="the trees' file (.gz: compressed)")
    parser.add_argument("--sentences", type=at_least(0), default=0, help="how many to draw (default 0: every one)")
    parser.add_argument("--seed", type=at_least(0), default=1, help="the draw's seed (default 1)")
    parser.add_argument("--max-words", type=at_least(1), default=40, help="longer sentences are left out (default 40)")


def run(args: argparse.Namespace) -> int:
    from ..parse.pcfg import BEST, PCFG
    from ..parse.silver import make_silver, write_trees
    from ..parse.trees import read_treebank

    if args.text is None or args.out == "-" or same_file(args.text, args.out):
        raise ValueError("--text and --out must be two files (the text is never written over)")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    gold = read_treebank(args.treebank, args.train)
    log(f"training the PCFG ({BEST}) on {len(gold):,} trees of {args.treebank}: {args.train}")
    grammar = PCFG.train(gold, **BEST)
    trees, report = make_silver(grammar, args.text, args.sentences, args.seed, args.max_words, log)
    if not trees:
        raise ValueError(f"{args.text}: no sentence was parsed ({report})")
    write_trees(args.out, trees)
    log(
        f"{args.out}: {report.parsed:,} trees of {report.chosen:,} sentences drawn; left out: {report.empty} empty, "
        f"{report.too_long} over {args.max_words} words, {report.no_parse} without a parse"
    )
    return 0
