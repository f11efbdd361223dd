"""What a request may ask for: the server's limits (the bodies are checked against them in `serve.schemas`), and
`ApiError`, a refusal naming its field, which the app turns into a JSON error with its status."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limits:
    """The options of `aiayn serve` that bound one request and the queue; RANGES holds each one's bounds."""

    max_body_bytes: int = 256 * 1024  # a request body larger than this: 413
    max_lines: int = 64  # lines in one /api/translate request
    max_chars: int = 1000  # characters in one line (or explain source / target)
    max_beam: int = 16
    max_alpha: float = 5.0
    max_queue: int = 256  # requests waiting for the model; one more: 503 with Retry-After
    batch_window_ms: float = 5.0  # how long the worker waits for more requests to join a batch
    max_batch_lines: int = 256  # lines the worker puts into one model batch
    max_connections: int = 1000  # open at once (aiayn serve); one more is answered 503 and closed
    header_timeout_s: float = 10.0  # from a connection's opening, or its last response, to its next request's headers
    body_timeout_s: float = 30.0  # from a request's headers to the end of its body: a body still arriving then is 408

    def __post_init__(self) -> None:
        for f in fields(self):
            value, (low, high) = getattr(self, f.name), RANGES[f.name]
            name = f"--{f.name.replace('_', '-')}"
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"{name} must be a number, not {type(value).__name__}")
            if not (math.isfinite(value) and low <= value and (high is None or value <= high)):
                upper = f" and at most {high}" if high is not None else ""
                raise ValueError(f"{name} must be a finite number of at least {low}{upper}, got {value}")


# Each limit's (low, high); None: unbounded. A batching window past 10 s would only stall every request.
RANGES: dict[str, tuple[float, float | None]] = {
    "max_body_bytes": (1, None),
    "max_lines": (1, None),
    "max_chars": (1, None),
    "max_beam": (1, None),
    "max_alpha": (0, 100),
    "max_queue": (1, None),
    "batch_window_ms": (0, 10_000),
    "max_batch_lines": (1, None),
    "max_connections": (1, None),
    "header_timeout_s": (0.001, 3600),
    "body_timeout_s": (0.001, 3600),
}


class ApiError(Exception):
    """A request the server will not run: HTTP status, the field at fault, and why."""

    def __init__(self, status: int, field: str | None, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field, message, headers or {}

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.message, "field": self.field}
