"""aiayn serve: the web page and JSON API for a model (Starlette app under uvicorn), on localhost by default.

Open http://127.0.0.1:8000/ for the page: translate, attention of every layer and head, the beam
tree with "what if", and the paper's figures. The limits below bound every request; a request past
them gets a JSON error naming the field.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from ..serve.limits import Limits
from .translate import add_gemm_argument

HELP = {
    "max_body_bytes": "largest request body", "max_lines": "lines in one translate request",
    "max_chars": "characters in one line", "max_beam": "largest beam size a request may ask for",
    "max_alpha": "largest length penalty alpha", "max_queue": "requests waiting for the model before 503",
    "batch_window_ms": "how long the model worker waits for requests to join a batch",
    "max_batch_lines": "lines in one model batch",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="an aiayn model directory or a Hugging Face Marian one")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--source-lang", help="the model's source language, for a directory that does not record it")
    parser.add_argument("--target-lang", help="the model's target language, likewise")
    parser.add_argument("--no-batching", action="store_true", help="run one request at a time (for the benchmark)")
    parser.add_argument("--beam-size", "-b", type=int, help="default beam width (default: the model's, else 4)")
    parser.add_argument("--alpha", type=float, help="default length penalty alpha (default: the model's, else 0.6)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--int8", action="store_true", help="int8 weights for the linear layers (CPU)")
    add_gemm_argument(parser)  # measured for batches of 32 lines; a server of single lines gains from +packed
    limits = parser.add_argument_group("limits")
    for f in fields(Limits):
        limits.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                            help=f"{HELP[f.name]} (default {f.default})")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..decode.translate import Translator
    from ..serve.app import build_app

    limits = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    translator = Translator.load(args.model, device=args.device, int8=args.int8, gemm=args.gemm,
                                 beam_size=args.beam_size, alpha=args.alpha)
    app = build_app(translator, args.model, limits, batching=not args.no_batching,
                    src_lang=args.source_lang, tgt_lang=args.target_lang)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"aiayn serve: listening on {args.host}: other machines can reach this server", file=sys.stderr)
    print(f"aiayn serve: {args.model} at http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
