"""aiayn parse: one tree per input line, in order (§6.3: alpha 0.3, input length + 300; beam 120, chosen on dev).

Input: tokenised sentences, one a line, words separated by spaces (as in the Penn Treebank:
"Mr. Vinken is chairman ."). Output: one `(TOP ...)` tree a line, which `aiayn evaluate --task
parse` and EVALB read. The line rules of `aiayn translate`: an empty line gives an empty line; a line
that is not UTF-8 or too long stops the run naming it; --output is written whole or not at all.
The search writes only well-formed trees held to the training trees' tags and shapes, at beam 120
(--search paper: §6.3's own search at beam 21, whose outputs that are not trees are repaired; how
many is reported on stderr). `-b 21` parses 6-8 times faster, about 3 F1 lower.
"""

from __future__ import annotations

import argparse
import sys
from typing import BinaryIO, TextIO

from .options import at_least, number
from .paths import input_file, output_file, same_file, text_output
from .translate import each_block


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="a parsing model directory (aiayn train recipes/ptb-parse.yaml) or a hub id"
    )
    parser.add_argument("--input", "-i", type=input_file, help="tokenised sentences, one a line (default: stdin)")
    parser.add_argument("--output", "-o", type=output_file, help="where to write the trees (default: stdout)")
    parser.add_argument(
        "--beam-size",
        "-b",
        type=at_least(1),
        help="beam width (default 120 for the constrained search, chosen on dev; "
        "21 with --search paper, §6.3); 1 = greedy",
    )
    parser.add_argument("--alpha", type=number(), help="length penalty alpha (default 0.3, §6.3)")
    parser.add_argument(
        "--search",
        choices=["constrained", "paper"],
        default="constrained",
        help="constrained (the default; not in the paper): only well-formed trees over the words, held to "
        "the training trees' tags and shapes; paper: §6.3's search, repaired afterwards (docs/parsing.md)",
    )
    parser.add_argument(
        "--constrained", action="store_const", const="constrained", dest="search", help=argparse.SUPPRESS
    )  # the default now; kept for older scripts
    parser.add_argument("--batch-size", type=at_least(1), default=32, help="sentences per batch (default 32)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--truncate", action="store_true", help="cut sentences longer than the model takes")
    parser.add_argument(
        "--unescape",
        action="store_true",
        help="write brackets in words as themselves, not as the treebank's -LRB- -RRB- -LSB- -RSB- "
        "-LCB- -RCB- (the lines are then no longer trees EVALB reads)",
    )


def parse_stream(parser, stream: BinaryIO, name: str, out: TextIO, unescape: bool = False) -> int:
    """Parse every line of stream into out; returns the number of lines."""

    def write(block: list[str], _done: int) -> None:
        out.writelines(tree + "\n" for tree in parser.parse_lines(block, unescape))

    return each_block(stream, name, out, write)


def run(args: argparse.Namespace) -> int:
    from ..parser import Parser

    if args.input and args.output and same_file(args.input, args.output):
        raise ValueError(
            f"-o {args.output}: the same file as -i {args.input}; the input would be replaced "
            f"by its trees; write to another file"
        )

    parser = Parser.load(
        args.model,
        args.device,
        args.search == "constrained",
        beam_size=args.beam_size,
        alpha=args.alpha,
        batch_size=args.batch_size,
        truncate=args.truncate,
    )
    name = args.input or "<stdin>"
    stream = open(args.input, "rb") if args.input else sys.stdin.buffer
    try:
        with text_output(args.output) as out:
            parse_stream(parser, stream, name, out, args.unescape)
    finally:
        if args.input:
            stream.close()
    print(f"aiayn parse: {parser.report()}", file=sys.stderr)
    return 0
