"""aiayn serve: the web page and JSON API for a model (Starlette app under uvicorn), on localhost by default.

Open http://127.0.0.1:8000/ for the page: translate, attention of every layer and head, the beam
tree with "what if", and the paper's figures. The limits below bound every request; a request past
them gets a JSON error naming the field.
"""

from __future__ import annotations

import argparse
import socket
import sys
from dataclasses import fields, replace

from ..serve.limits import RANGES, Limits
from .options import PORTS, at_least, number
from .translate import add_gemm_argument, refuse_a_parser

HELP = {
    "max_body_bytes": "largest request body",
    "max_lines": "lines in one translate request",
    "max_chars": "characters in one line",
    "max_beam": "largest beam size a request may ask for",
    "max_alpha": "largest length penalty alpha",
    "max_queue": "requests waiting for the model before 503",
    "batch_window_ms": "how long the model worker waits for requests to join a batch",
    "max_batch_lines": "lines in one model batch",
    "max_connections": "connections open at once; one more is answered 503 (fewer where the open-file limit is lower)",
    "header_timeout_s": "seconds a connection may take to send its request's headers before it is closed",
    "body_timeout_s": "seconds a request may take to send its body after its headers (then 408)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="an aiayn model directory or a Hugging Face Marian one")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=PORTS, default=8000)
    parser.add_argument("--source-lang", help="the model's source language, for a directory that does not record it")
    parser.add_argument("--target-lang", help="the model's target language, likewise")
    parser.add_argument("--no-batching", action="store_true", help="run one request at a time (for the benchmark)")
    parser.add_argument("--beam-size", "-b", type=at_least(1), help="default beam width (default: the model's, else 4)")
    parser.add_argument(
        "--alpha", type=number(low=0), help="default length penalty alpha (default: the model's, else 0.6)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--int8", action="store_true", help="int8 weights for the linear layers (CPU)")
    add_gemm_argument(parser)  # measured for batches of 32 lines; a server of single lines gains from +packed
    limits = parser.add_argument_group("limits")
    for f in fields(Limits):
        low, high = RANGES[f.name]
        kind = at_least(low, high) if isinstance(f.default, int) else number(low=low, at_most=high)
        limits.add_argument(
            f"--{f.name.replace('_', '-')}", type=kind, default=f.default, help=f"{HELP[f.name]} (default {f.default})"
        )


def run(args: argparse.Namespace) -> int:
    from ..cpu.backend import caches_for_translation
    from ..serve.app import build_app, is_local_name
    from ..serve.connections import SPARE_FILES, QuietServer, allowed_connections, raise_file_limit
    from ..translator import Translator

    refuse_a_parser(args.model, "aiayn serve")
    raise_file_limit()  # a soft limit of 1,024 files would cap the connections far below the hard limit
    limits = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    allowed = allowed_connections(limits.max_connections)
    if allowed < limits.max_connections:
        print(
            f"aiayn serve: --max-connections {limits.max_connections} lowered to {allowed}: the open-file limit "
            f"is {allowed + SPARE_FILES} (ulimit -n)",
            file=sys.stderr,
        )
        limits = replace(limits, max_connections=allowed)
    if args.beam_size is not None and not 1 <= args.beam_size <= limits.max_beam:
        raise ValueError(f"--beam-size {args.beam_size} is out of range: 1 to --max-beam ({limits.max_beam})")
    if args.alpha is not None and not 0 <= args.alpha <= limits.max_alpha:
        raise ValueError(f"--alpha {args.alpha} is out of range: 0 to --max-alpha ({limits.max_alpha})")
    with listen(args.host, args.port) as listening:  # first: a port in use is said before the model loads
        caches_for_translation()  # a process that only translates: oneDNN's smaller caches, before its first product
        translator = Translator.load(
            args.model, device=args.device, int8=args.int8, gemm=args.gemm, beam_size=args.beam_size, alpha=args.alpha
        )
        local = is_local_name(args.host)
        app = build_app(
            translator,
            args.model,
            limits,
            batching=not args.no_batching,
            src_lang=args.source_lang,
            tgt_lang=args.target_lang,
            local_only=local,
        )
        if not local:
            print(f"aiayn serve: listening on {args.host}: other machines can reach this server", file=sys.stderr)
        print(f"aiayn serve: {args.model} at http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
        QuietServer(server_config(app, limits)).run(sockets=[listening])
    return 0


def server_config(app, limits: Limits):
    """uvicorn's settings for app under limits: HTTP/1.1 with the connection cap and header deadline, idle
    keep-alive connections closed after 5 s, in-flight requests given 20 s to finish on SIGTERM."""
    import uvicorn

    from ..serve.connections import guarded_protocol

    return uvicorn.Config(
        app,
        log_level="warning",
        http=guarded_protocol(limits),
        timeout_keep_alive=5,
        limit_concurrency=limits.max_connections + 1,
        timeout_graceful_shutdown=20,
    )


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port for the server (IPv4 unless host is an IPv6 address, as uvicorn binds), or
    a ValueError that says why not (a port in use, ...)."""
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port} is out of range: 0 to 65535")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # now: a second server on the port is refused at its bind, not after loading its model
    except OSError as err:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return sock
