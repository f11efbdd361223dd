"""What one connection may hold: the server's connection cap, header deadline and quiet accept errors.

uvicorn times out a keep-alive connection only after a response; a client that opens connections and
sends nothing holds each one, and a file descriptor, for ever. `guarded_protocol` closes a connection whose
request headers have not all arrived within `Limits.header_timeout_s` of its opening (or of its previous
response) and answers a connection past `Limits.max_connections` with a 503 and closes it; `aiayn serve` keeps
file descriptors to spare below the process's limit, so that accept() never runs out. Should it run out
all the same, asyncio's accept errors are logged one line at a time, at most once a second.
"""

from __future__ import annotations

import asyncio
import resource
import signal
import sys
import time

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .limits import Limits

SPARE_FILES = 64  # descriptors kept for the model's files, logs and the listening socket
_BUSY_BODY = b'{"error": "the server has too many open connections; try again shortly", "field": null}'
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


def raise_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (a common soft default is 1,024); the new
    soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a hard limit of infinity some kernels refuse as a soft one: keep the soft
            pass
    return soft


def allowed_connections(wanted: int) -> int:
    """wanted, or fewer where the open-file limit would not leave SPARE_FILES descriptors beside them."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - SPARE_FILES))


def guarded_protocol(limits: Limits) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with the connection cap and the header deadline of limits."""

    class Guarded(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections:
                transport.write(BUSY)
                transport.close()
                self.transport = None
                return
            super().connection_made(transport)
            self._request_seen = None
            self._deadline = self.loop.call_later(limits.header_timeout_s, self._headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.transport is None:  # refused at connection_made: never counted
                return
            self._cancel_deadline()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.transport is None:
                return
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and self.cycle is not self._request_seen:  # a new request's headers are in
                self._request_seen = self.cycle
                self._cancel_deadline()

        def on_response_complete(self) -> None:
            self._cancel_deadline()  # the next request on this connection has its own deadline
            self._deadline = self.loop.call_later(limits.header_timeout_s, self._headers_late)
            super().on_response_complete()

        def _cancel_deadline(self) -> None:
            if getattr(self, "_deadline", None) is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_late(self) -> None:
            self._deadline = None
            if (
                self.transport is not None
                and not self.transport.is_closing()
                and (self.cycle is None or self.cycle.response_complete)
            ):
                self.transport.close()

    return Guarded


class QuietServer(uvicorn.Server):
    """uvicorn's server with asyncio's "out of system resource" accept errors logged one line a second at most,
    not a traceback each (a client holding every descriptor would otherwise flood the log), and a drain on
    SIGTERM: the app's queued requests are answered 503 before uvicorn waits for those in flight, and the
    process then exits 0 (a stop asked for), where uvicorn would raise the signal again."""

    async def startup(self, sockets=None) -> None:
        asyncio.get_running_loop().set_exception_handler(rate_limited(asyncio.get_running_loop()))
        await super().startup(sockets=sockets)

    async def shutdown(self, sockets=None) -> None:
        drain = getattr(self.config.app, "drain", None)
        if drain is not None:
            drain()
        await super().shutdown(sockets=sockets)

    def handle_exit(self, sig: int, frame) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            self._captured_signals = [s for s in self._captured_signals if s != signal.SIGTERM]


def rate_limited(loop: asyncio.AbstractEventLoop):
    last = {"at": 0.0, "dropped": 0}

    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if "out of system resource" not in str(context.get("message", "")):
            return loop.default_exception_handler(context)
        now = time.monotonic()
        if now - last["at"] < 1.0:
            last["dropped"] += 1
            return
        err = context.get("exception")
        more = f" ({last['dropped']} more since the last line)" if last["dropped"] else ""
        print(f"aiayn serve: cannot accept a connection: {err}{more}", file=sys.stderr)
        last["at"], last["dropped"] = now, 0

    return handle
