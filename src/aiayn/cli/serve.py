"""aiayn serve: the web page, the JSON API and LibreTranslate's interface for one or more models (a Starlette app
under uvicorn), on localhost by default.

Open http://127.0.0.1:8000/ for the page: translate, attention of every layer and head, the beam
tree with "what if", and the paper's figures. The limits below bound every request; a request past
them gets a JSON error naming the field. The server answers as soon as it listens (/api/health says
"loading" until every model is loaded); SIGTERM drains it and exits 0.
"""

from __future__ import annotations

import argparse
import socket
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

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


GRACE_S = 25  # on SIGTERM, for the batches in flight: the process is gone within 30 s


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        action="append",
        metavar="[NAME=]DIR",
        help="a model to serve: an aiayn model directory, a Hugging Face Marian one, or a hub id; repeat it for "
        'several, each with a name (en-de=DIR) that requests give as their "model" (default: the folder\'s name)',
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=PORTS, default=8000)
    parser.add_argument(
        "--source-lang",
        action="append",
        default=[],
        metavar="[NAME=]LANG",
        help="a model's source language, for a directory that does not record it (NAME= where several are served)",
    )
    parser.add_argument("--target-lang", action="append", default=[], metavar="[NAME=]LANG", help="likewise")
    parser.add_argument(
        "--neighbours",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="source-language sentences, one a line (plain or .gz), among whose tokens the page finds a source "
        "token's nearest by encoder state (default: the training text of the run a model was trained in)",
    )
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


@dataclass
class ModelOption:
    """One --model: its name, the folder (a hub id resolved), and the languages the options give it."""

    name: str
    folder: Path
    source_lang: str | None = None
    target_lang: str | None = None
    neighbours: Path | None = None


def model_options(args: argparse.Namespace) -> list[ModelOption]:
    """--model [NAME=]DIR, each folder resolved (a hub id through the cache) and checked to be a translation model's
    before the server starts, with --source-lang and --target-lang [NAME=]LANG and --neighbours [NAME=]FILE given to
    their models."""
    from ..model_folder import detect_format, resolve

    models: list[ModelOption] = []
    for value in args.model:
        name, sep, where = value.partition("=")
        if not sep or Path(value).exists():  # a folder whose own name holds "=" stays a folder
            name, where = "", value
        if sep and not name.strip():
            raise ValueError(f"--model {value}: the name before '=' is empty")
        folder = resolve(where)
        refuse_a_parser(str(folder), "aiayn serve")
        detect_format(folder)  # not a model folder: said now, not after the server starts
        models.append(ModelOption(name or Path(where).name, folder))
    names = [m.name for m in models]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"--model: two models are named {name!r}; name them (--model NAME=DIR)")
    by_name = {m.name: m for m in models}
    for option, attr in (("--source-lang", "source_lang"), ("--target-lang", "target_lang")):
        for value in getattr(args, attr):
            name, sep, lang = value.rpartition("=")
            if not sep:
                if len(models) > 1:
                    raise ValueError(f"{option} {value}: {len(models)} models are served; say which: NAME={value}")
                name = models[0].name
            if name not in by_name:
                raise ValueError(f"{option} {value}: no model is named {name!r} (the names: {', '.join(by_name)})")
            if not lang.strip():
                raise ValueError(f"{option} {value}: the language is empty")
            setattr(by_name[name], attr, lang)
    for value in args.neighbours:
        name, sep, path = value.partition("=")
        if not sep or Path(value).exists():  # a file whose own name holds "=" stays a file
            if len(models) > 1:
                raise ValueError(f"--neighbours {value}: {len(models)} models are served; say which: NAME={value}")
            name, path = models[0].name, value
        if name not in by_name:
            raise ValueError(f"--neighbours {value}: no model is named {name!r} (the names: {', '.join(by_name)})")
        if not Path(path).is_file():
            raise ValueError(f"--neighbours {value}: no file {path}")
        by_name[name].neighbours = Path(path)
    return models


def run(args: argparse.Namespace) -> int:
    from ..cpu.backend import caches_for_translation
    from ..serve.app import build_app
    from ..serve.connections import SPARE_FILES, QuietServer, allowed_connections, raise_file_limit
    from ..serve.http import is_local_name
    from ..serve.models import ServedModel
    from ..translator import Translator

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

    def loader(folder: Path):
        return lambda: Translator.load(
            folder, device=args.device, int8=args.int8, gemm=args.gemm, beam_size=args.beam_size, alpha=args.alpha
        )

    with listen(args.host, args.port) as listening:  # first: a port in use is said before any model loads
        models = model_options(args)  # a hub id not in the cache yet is downloaded here
        caches_for_translation()  # a process that only translates: oneDNN's smaller caches, before its first product
        served = [
            ServedModel(m.name, m.folder, loader(m.folder), m.source_lang, m.target_lang, m.neighbours) for m in models
        ]
        local = is_local_name(args.host)
        app = build_app(served, limits, batching=not args.no_batching, local_only=local)
        server = QuietServer(server_config(app, limits))
        failed: list[str] = []

        def stop(why: str) -> None:  # a model that cannot load: the server says why and ends
            failed.append(why)
            server.should_exit = True

        app.models.on_failure = stop
        if not local:
            print(f"aiayn serve: listening on {args.host}: other machines can reach this server", file=sys.stderr)
        names = ", ".join(f"{m.name} ({m.folder})" for m in models)
        print(f"aiayn serve: {names} at http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
        server.run(sockets=[listening])
    if failed:
        print(f"aiayn serve: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def server_config(app, limits: Limits):
    """uvicorn's settings for app under limits: HTTP/1.1 with the connection cap and header deadline, idle
    keep-alive connections closed after 5 s, the batches in flight given GRACE_S to finish on SIGTERM."""
    import uvicorn

    from ..serve.connections import guarded_protocol

    return uvicorn.Config(
        app,
        log_level="warning",
        http=guarded_protocol(limits),
        timeout_keep_alive=5,
        limit_concurrency=limits.max_connections + 1,
        timeout_graceful_shutdown=GRACE_S,
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
