"""aiayn info: a model configuration and its parameter counts by part (Table 3's "params")."""

from __future__ import annotations

import argparse

from ..config import PRESETS, ModelConfig
from ..model import Transformer
from .options import at_least

PAPER_MILLIONS = {"base": 65, "big": 213}  # Table 3, with a shared ~37,000-token vocabulary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="base", choices=list(PRESETS))
    parser.add_argument(
        "--vocab-size", type=at_least(1, 1 << 24), default=37000, help="shared vocabulary size (default 37000)"
    )
    parser.add_argument("--model", help="a model directory (or a hub id) to describe instead of a preset")


def run(args: argparse.Namespace) -> int:
    if args.model:
        from ..model_folder import resolve
        from ..weights import load_model

        model = load_model(resolve(args.model))
        config, name = model.config, args.model
    else:
        config, name = ModelConfig.preset(args.preset, vocab_size=args.vocab_size), args.preset
        model = Transformer(config)
    print(f"model {name}")
    for key, value in config.to_dict().items():
        print(f"  {key:18s} {value}")
    print("parameters")
    for part, n in model.parameter_counts().items():
        print(f"  {part:18s} {n:>13,}")
    total = model.num_parameters()
    print(f"  {'total':18s} {total:>13,}  ({total / 1e6:.1f}M)")
    if name in PAPER_MILLIONS and config.vocab_size == 37000:
        paper = PAPER_MILLIONS[name]
        print(f"  paper, Table 3: {paper}M ({(total / 1e6 - paper) / paper:+.1%})")
    return 0
