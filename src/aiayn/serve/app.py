"""The ASGI app (Starlette): the JSON API and the page, one model worker behind both.

GET /api/health, GET /api/model, POST /api/translate, POST /api/explain, GET /api/figures/{softmax,
positions,cost}; the page at / and its files under /static/. Every error is a JSON object
{"error", "field"} with a 4xx status (503 with Retry-After when the queue is full), never a trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, Response
from starlette.responses import JSONResponse as StarletteJSON
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..model import Transformer
from ..translator import SentenceTooLong, Translator
from . import figures
from .explain import Inspector
from .limits import ApiError, Limits, explain_request, translate_request
from .worker import ModelWorker

STATIC = Path(__file__).parent / "static"


class JSONResponse(StarletteJSON):
    """Every reply of the app: ASCII JSON, so that whatever a client sent (a lone surrogate in a field's name, echoed
    in the error naming it) can be written; a NaN or infinity is a fault of the server's, never invalid JSON."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


# Nothing from elsewhere: scripts, styles, images and requests only from this server.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'"),
    (b"x-content-type-options", b"nosniff"),
]


def build_app(
    translator: Translator,
    model_dir: str | Path,
    limits: Limits = Limits(),
    batching: bool = True,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    local_only: bool = False,
) -> Counted:
    """The app serving translator; model_dir is where it was loaded from (its run's results sit beside it).

    local_only (`aiayn serve` on a loopback address): requests must name this machine in their Host header, so
    that a web page elsewhere cannot reach the server through a DNS name it points here ("DNS rebinding"). Off for
    an app served some other way (behind a proxy, whose requests name the proxy's host).
    """
    api = Api(translator, Path(model_dir), limits, batching, src_lang, tgt_lang)
    app = Starlette(
        routes=[
            Route("/", api.index),
            Route("/favicon.ico", api.favicon),
            Route("/api/health", api.health),
            Route("/api/model", api.model_info),
            Route("/api/translate", api.translate, methods=["POST"]),
            Route("/api/explain", api.explain, methods=["POST"]),
            Route("/api/figures/softmax", api.softmax_figure),
            Route("/api/figures/positions", api.positions_figure),
            Route("/api/figures/cost", api.cost_figure),
            Mount("/static", StaticFiles(directory=STATIC)),
        ],
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: internal_error},
        lifespan=api.lifespan,
    )
    app.state.worker = api.worker
    return Counted(app, api.worker, local_only)


class Api:
    """The handlers: each checks its request, then asks the model worker or the figures."""

    def __init__(
        self,
        translator: Translator,
        model_dir: Path,
        limits: Limits,
        batching: bool,
        src_lang: str | None,
        tgt_lang: str | None,
    ):
        self.translator, self.model_dir, self.limits, self.batching = translator, model_dir, limits, batching
        self.worker = ModelWorker(
            translator, batching, limits.batch_window_ms / 1000, limits.max_queue, limits.max_batch_lines
        )
        self.inspector = Inspector(translator)
        self.config = config = translator.model.config
        self.src_lang = src_lang or config.src_lang  # the options win over the directory
        self.tgt_lang = tgt_lang or config.tgt_lang
        with torch.device("meta"):  # counted on an empty copy: the served one may be int8
            shape = Transformer(config)
        self.parameters = {"total": shape.num_parameters(), **shape.parameter_counts()}

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette):
        await self.worker.start()
        yield
        await self.worker.stop()

    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "model_loaded": True,
                "batching": self.batching,
                "queued": self.worker.waiting,
                **self.worker.counters,
            }
        )

    async def model_info(self, request: Request) -> Response:
        config = self.config
        return JSONResponse(
            {
                "name": self.model_dir.name,
                "config": config.to_dict(),
                "decode": asdict(self.translator.config),
                "parameters": self.parameters["total"],
                "parameter_counts": self.parameters,
                "source_lang": self.src_lang,
                "target_lang": self.tgt_lang,
                "vocab_size": config.vocab_size,
                "target_vocab_size": config.target_vocab_size,
                "encoder": config.encoder._asdict(),
                "decoder": config.decoder._asdict(),
                "limits": asdict(self.limits),
                "gemm": self.translator.gemm,
            }
        )

    async def translate(self, request: Request) -> Response:
        body = await read_json(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        req = translate_request(body, self.limits, self.translator.config.beam_size)
        encode_or_fail(self.translator, req.lines, "lines")
        results = await self.worker.translate(req.lines, req.beam_size, req.alpha, req.n_best)
        reply: dict[str, Any] = {
            "translations": [h[0].text if h else "" for h in results],
            "scores": [h[0].score if h else 0.0 for h in results],
        }
        if req.n_best > 1:
            reply["n_best"] = [[{"text": t.text, "score": t.score} for t in h] for h in results]
        return JSONResponse(reply)

    async def explain(self, request: Request) -> Response:
        body = await read_json(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        req = explain_request(body, self.limits, self.config.target_vocab_size)
        src_ids = encode_or_fail(self.translator, [req.source], "source")[0]
        return JSONResponse(await self.worker.run_alone(lambda: self.inspector.explain(req, src_ids)))

    async def softmax_figure(self, request: Request) -> Response:
        q = request.query_params
        d_k = figures.query_int(q, "d_k", 64, 1, 4096)
        raw_scale = figures.query_float(q, "raw_scale", 2.0, 0.0, 10.0)
        scaled = figures.query_bool(q, "scaled", True)
        return JSONResponse(figures.softmax_figure(d_k, raw_scale, scaled))

    async def positions_figure(self, request: Request) -> Response:
        length = figures.query_int(request.query_params, "length", 50, 1, min(512, self.config.max_len))
        return JSONResponse(figures.positions_figure(self.config, length))

    async def cost_figure(self, request: Request) -> Response:
        return JSONResponse(figures.cost_figure(self.model_dir))

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def favicon(self, request: Request) -> Response:
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


def encode_or_fail(translator: Translator, lines: list[str], field: str) -> list[list[int]]:
    """Source ids of lines; a line longer than the model takes is a 422 naming it."""
    try:
        return translator.encode(lines)
    except SentenceTooLong as err:
        name = f"lines[{err.index}]" if field == "lines" else field
        raise ApiError(422, name, f"{name}: {err.detail}") from None


async def read_json(request: Request, max_bytes: int, timeout_s: float = 30.0) -> Any:
    """The request body parsed as JSON; over max_bytes is 413, not all there within timeout_s is 408, not JSON
    is 400."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ApiError(413, "body", f"the body has {int(length)} bytes, more than this server's limit of {max_bytes}")
    try:
        body = await asyncio.wait_for(read_body(request, max_bytes), timeout_s)
    except asyncio.TimeoutError:  # a client that sends its body slowly, or not at all, does not hold the server
        raise ApiError(408, "body", f"the body did not arrive within {timeout_s:g} s") from None
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ApiError(400, "body", f"the body is not valid JSON: {err}") from None


async def read_body(request: Request, max_bytes: int) -> bytearray:
    """The request body, at most max_bytes (413 past them)."""
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise ApiError(413, "body", f"the body is more than this server's limit of {max_bytes} bytes")
    except ClientDisconnect:  # no one to answer; not a fault of the server's (no traceback in its log)
        raise ApiError(400, "body", "the client went away before the whole body arrived") from None
    return body


async def api_error(request: Request, err: ApiError) -> Response:
    if request.app.state.worker and err.status < 500:
        request.app.state.worker.counters["refused_bad_input"] += 1
    return JSONResponse(err.to_dict(), status_code=err.status, headers=err.headers)


async def http_error(request: Request, err: HTTPException) -> Response:
    return JSONResponse(
        {"error": f"{request.method} {request.url.path}: {err.detail}", "field": None},
        status_code=err.status_code,
        headers=getattr(err, "headers", None),
    )


async def internal_error(request: Request, err: Exception) -> Response:
    traceback.print_exception(err, file=sys.stderr)  # the server's log has it; the client gets one line
    return JSONResponse({"error": f"internal error: {type(err).__name__}", "field": None}, status_code=500)


LOOPBACK_NAMES = ("localhost", "localhost.", "[::1]", "::1")  # and any 127.x.y.z (`is_local_name`)


def is_local_name(name: str) -> bool:
    """Whether a host name (`--host`, or a Host header's) is this machine: localhost, or a loopback address."""
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


class Counted:
    """ASGI wrapper: counts API requests, adds the security headers to every response, and refuses what a page of
    another site could send: a POST whose body is not declared JSON (a form or plain text needs no permission
    from this server to be sent across sites; JSON does), and, on a local-only server, a Host not this machine."""

    def __init__(self, app: Starlette, worker: ModelWorker, local_only: bool = False):
        self.app, self.worker, self.state, self.local_only = app, worker, app.state, local_only

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].startswith("/api/"):
            self.worker.counters["requests"] += 1
        refusal = self.refusal(scope)
        if refusal is not None:
            self.worker.counters["refused_bad_input"] += 1
            status, field, message = refusal
            response = JSONResponse({"error": message, "field": field}, status_code=status)
            return await response(scope, receive, self.with_headers(send))
        await self.app(scope, receive, self.with_headers(send))

    def refusal(self, scope) -> tuple[int, str, str] | None:
        """(status, field, message) for a request refused before it reaches the app, else None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.local_only:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_local_name(name):
                return (
                    421,
                    "host",
                    f"Host {host!r}: this server answers only requests to this machine (127.0.0.1, localhost)",
                )
        if scope["method"] == "POST" and scope["path"].startswith("/api/"):
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json":
                return (
                    415,
                    "content-type",
                    f"the body must be sent as Content-Type: application/json, not {media or 'none'!r}",
                )
        return None

    @staticmethod
    def with_headers(send):
        """send, adding SECURITY_HEADERS to the response's start."""

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        return send_with_headers
