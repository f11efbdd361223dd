"""aiayn copy-demo: train the tiny model to copy random sequences, then decode a few."""

from __future__ import annotations

import argparse

import torch

from .options import SEEDS, at_least


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=at_least(1), default=1000)
    parser.add_argument("--seed", type=SEEDS, default=0)


def run(args: argparse.Namespace) -> int:
    from ..copy_task import N_SPECIAL, copy_accuracy, copy_batch, train_copy
    from ..decode.greedy import greedy_search

    model = train_copy(steps=args.steps, seed=args.seed, log=print)
    src, _, _ = copy_batch(5, 10, 11, torch.Generator().manual_seed(7))
    for s, h in zip(src, greedy_search(model, src, max_len=11)):
        show = lambda ids: " ".join(str(int(i) - N_SPECIAL) for i in ids if i >= N_SPECIAL)  # noqa: E731
        print(f"source {show(s):30s} -> output {show(h)}")
    print(f"exact copies of 100 held-out sequences: {copy_accuracy(model):.0%}")
    return 0
