"""The server's HTTP edge: JSON replies that can always be written, bodies read within limits, errors as JSON,
and the guard every request passes (the host check, JSON-only POSTs, security headers, metrics)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import sys
import time
import traceback
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse as StarletteJSON
from starlette.responses import Response

from .limits import ApiError
from .metrics import Metrics


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


async def read_json(request: Request, max_bytes: int, timeout_s: float = 30.0) -> Any:
    """The request body parsed as JSON; over max_bytes is 413, not all there within timeout_s is 408, not JSON
    is 400."""
    body = await read_bytes(request, max_bytes, timeout_s)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ApiError(400, "body", f"the body is not valid JSON: {err}") from None


async def read_bytes(request: Request, max_bytes: int, timeout_s: float = 30.0) -> bytearray:
    """The request body, at most max_bytes (413), all there within timeout_s (408)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ApiError(413, "body", f"the body has {int(length)} bytes, more than this server's limit of {max_bytes}")
    try:
        return await asyncio.wait_for(read_body(request, max_bytes), timeout_s)
    except asyncio.TimeoutError:  # a client that sends its body slowly, or not at all, does not hold the server
        raise ApiError(408, "body", f"the body did not arrive within {timeout_s:g} s") from None


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


# Bodies a page of another site can send without this server's leave: refused on every POST but LibreTranslate's,
# whose clients send forms (a translation changes nothing on the server).
FORM_ROUTES = ("/translate",)
FORM_TYPES = ("application/json", "application/x-www-form-urlencoded")


class Guard:
    """ASGI wrapper: refuses what a page of another site could send (a POST whose body is not declared JSON, which
    a form or plain text needs no permission to be; on a local-only server, a Host not this machine), adds the
    security headers to every response, and counts every answer in the metrics."""

    def __init__(self, app, metrics: Metrics, local_only: bool = False):
        self.app, self.metrics, self.local_only = app, metrics, local_only
        self.counters = {"requests": 0, "refused_bad_input": 0}  # of the API's routes, for /api/health

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.monotonic(), [500]
        counted = scope["path"].startswith("/api/") or scope["path"] in FORM_ROUTES
        self.counters["requests"] += counted

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        try:
            refusal = self.refusal(scope)
            if refusal is not None:
                code, field, message = refusal
                response = JSONResponse({"error": message, "field": field}, status_code=code)
                return await response(scope, receive, send_with_headers)
            await self.app(scope, receive, send_with_headers)
        finally:
            self.metrics.answered(scope["path"], scope["method"], status[0], time.monotonic() - started)
            self.counters["refused_bad_input"] += counted and 400 <= status[0] < 500

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
        if scope["method"] == "POST":
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            allowed = FORM_TYPES if scope["path"] in FORM_ROUTES else FORM_TYPES[:1]
            if media not in allowed:
                return (
                    415,
                    "content-type",
                    f"the body must be sent as Content-Type: {' or '.join(allowed)}, not {media or 'none'!r}",
                )
        return None
