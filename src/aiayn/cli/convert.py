"""`aiayn convert IN_DIR OUT_DIR --to {aiayn,marian,ctranslate2}`: move a model between formats.

aiayn convert opus-mt-en-de/ en-de/ --to aiayn            Marian -> aiayn (fine-tune, translate)
aiayn convert runs/multi30k/model/ hf/ --to marian        aiayn -> a dir transformers loads
aiayn convert runs/multi30k/model/ ct2/ --to ctranslate2 --quantization int8
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..convert import FORMATS, QUANTIZATIONS

    parser.add_argument(
        "input", help="an aiayn model directory, a Hugging Face Marian one, or a hub id (Helsinki-NLP/opus-mt-en-de)"
    )
    parser.add_argument("output", help="the directory to write")
    parser.add_argument("--to", required=True, choices=FORMATS, help="the output format")
    parser.add_argument(
        "--from",
        dest="source",
        default="auto",
        choices=("auto", "aiayn", "marian"),
        help="the input format (default: read from its config.json)",
    )
    parser.add_argument(
        "--quantization", choices=QUANTIZATIONS, help="CTranslate2 weight type (default: as stored, float32)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace the model files in an existing output directory (nothing else in it is touched)",
    )


def check_output(model: Path, out: Path) -> None:
    """Refuse an output that is the input, holds it, or lies inside it: writing there could destroy the model."""
    source, target = model.resolve(), out.resolve()
    if target == source:
        raise ValueError(f"{out}: the output directory is the input model {model}; choose another")
    if target in source.parents:
        raise ValueError(f"{out}: the output directory holds the input model {model}; choose one beside it")
    if source in target.parents:
        raise ValueError(f"{out}: the output directory lies inside the input model {model}; choose one beside it")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: a file, not a directory")


def run(args: argparse.Namespace) -> int:
    from ..convert import aiayn_to_marian, marian_to_aiayn, to_ctranslate2
    from ..model_folder import detect_format, resolve
    from .paths import check_output_folder

    check_output_folder(args.output, "output")
    if args.quantization and args.to != "ctranslate2":
        raise ValueError("--quantization applies to --to ctranslate2 only")
    model = resolve(args.input)  # a hub id: its folder in the cache (a local folder wins)
    found = detect_format(model)
    if args.source != "auto" and args.source != found:
        raise ValueError(f"{args.input}: --from {args.source}, but its config.json is a {found} model")
    out = Path(args.output)
    check_output(model, out)
    if args.to != "ctranslate2" and (out / "config.json").exists() and not args.force:
        raise ValueError(f"{out} already holds a model; pass --force to replace its model files")
    if args.to == "ctranslate2":
        to_ctranslate2(model, out, args.quantization, force=args.force)
    elif args.to == found:
        raise ValueError(f"{args.input} is already a {found} model")
    elif args.to == "aiayn":
        marian_to_aiayn(model, out)
    else:
        aiayn_to_marian(model, out)
    print(f"{args.input} ({found}) -> {out} ({args.to}{', ' + args.quantization if args.quantization else ''})")
    return 0
