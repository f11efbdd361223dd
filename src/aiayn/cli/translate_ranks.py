"""aiayn translate under torchrun: the input split between ranks, one output in input order.

    torchrun --standalone --nproc-per-node N -m aiayn translate --model M -i in.txt -o out.txt

Every rank reads the same input a chunk at a time and translates lines r, r + N, r + 2N, ... of it
(neighbouring lines have similar lengths, so the shares cost about the same); the translations are
gathered on every rank (Gloo on CPUs, NCCL on GPUs), and rank 0 writes them in input order to a
temporary file renamed at the end: the same file as one process writes. A bad line stops every rank
with the same error naming the line.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

from ..files import read_text_lines
from ..train import distributed
from .paths import text_output
from .translate import CHUNK, chunks


def run(args: argparse.Namespace) -> int:
    """Join the process group, translate this rank's share of args.input; rank 0 writes args.output."""
    from .translate import load_translator, refuse_a_parser

    if not (args.input and args.output):
        raise ValueError(
            "under torchrun, give --input FILE and --output FILE (every rank reads the input file, so "
            "not standard input)"
        )
    refuse_a_parser(args.model, "aiayn translate")  # on every rank, before the process group
    device, joined = distributed.init(torch.device(args.device))
    try:
        args.device = str(device)  # cuda: this rank's GPU, LOCAL_RANK
        return translate_file(args, load_translator(args))
    finally:
        distributed.close(joined)


def translate_file(args: argparse.Namespace, translator) -> int:
    rank, world = distributed.rank(), distributed.world_size()
    main = rank == 0
    done = mine = 0
    with open(args.input, "rb") as stream, text_output(args.output) if main else open(os.devnull, "w") as out:
        for block in chunks(read_text_lines(stream, args.input), CHUNK):
            share = list(range(rank, len(block), world))
            texts, error = translate_share(translator, block, share, done, args.n_best)
            mine += len(share)
            parts: list = [None] * world
            dist.all_gather_object(parts, (texts, error))
            errors = sorted(e for _, e in parts if e)
            if errors:  # the first bad line, on every rank
                raise ValueError(f"{args.input}: line {errors[0][0]}: {errors[0][1]}")
            for j in range(len(block)):  # line j was rank j % world's (j // world)-th
                out.write(parts[j % world][0][j // world])
            done += len(block)
    print(f"aiayn translate: rank {rank} of {world} translated {mine} of {done} lines", file=sys.stderr)
    return 0


def translate_share(
    translator, block: list[str], share: list[int], done: int, n_best: int | None
) -> tuple[list[str], tuple[int, str] | None]:
    """The output text of each line of block in share (n_best lines each with --n-best), or an error."""
    from ..translator import SentenceTooLong

    lines = [block[j] for j in share]
    try:
        if not n_best:
            return [text + "\n" for text in translator.translate(lines)], None
        texts = []
        for j, hyps in zip(share, translator.translate_n_best(lines)):
            number = done + j + 1
            texts.append(
                "".join(
                    f"{number}\t{h.score if h else 0.0:.4f}\t{h.text if h else ''}\n" for h in hyps or [None] * n_best
                )
            )
        return texts, None
    except SentenceTooLong as err:
        return [], (done + share[err.index] + 1, err.detail)
