"""What a request may ask for: the server's limits, and requests checked against them field by field.

Every check failure is an `ApiError` naming the field, which the app turns into a JSON error with
a 4xx status; nothing a client sends reaches the model unchecked, and no field can name a file.
"""

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


@dataclass(frozen=True)
class TranslateRequest:
    lines: list[str]
    beam_size: int | None
    alpha: float | None
    n_best: int


@dataclass(frozen=True)
class ExplainRequest:
    source: str
    target: str | None
    target_ids: list[int] | None
    beam_size: int | None
    alpha: float | None


def translate_request(body: Any, limits: Limits, default_beam: int) -> TranslateRequest:
    """A /api/translate body checked: {"lines": [...], "beam_size"?, "alpha"?, "n_best"?}."""
    fields_of(body, required=("lines",), optional=("beam_size", "alpha", "n_best"))
    lines = body["lines"]
    if not isinstance(lines, list):
        raise ApiError(422, "lines", f"lines must be a list of strings, not {kind(lines)}")
    if not lines:
        raise ApiError(422, "lines", "lines is empty: send at least one line")
    if len(lines) > limits.max_lines:
        raise ApiError(422, "lines", f"{len(lines)} lines, more than this server's limit of {limits.max_lines}")
    for i, line in enumerate(lines):
        text(line, f"lines[{i}]", limits)
    beam = integer(body, "beam_size", 1, limits.max_beam)
    n_best = integer(body, "n_best", 1, beam or default_beam, "the beam size")
    return TranslateRequest(lines, beam, number(body, "alpha", 0.0, limits.max_alpha), n_best or 1)


def explain_request(body: Any, limits: Limits, vocab_size: int) -> ExplainRequest:
    """A /api/explain body checked: {"source", "target"?, "target_ids"?, "beam_size"?, "alpha"?}."""
    fields_of(body, required=("source",), optional=("target", "target_ids", "beam_size", "alpha"))
    source = text(body["source"], "source", limits)
    if not source.strip():
        raise ApiError(422, "source", "source is empty")
    target = body.get("target")
    if target is not None:
        text(target, "target", limits)
    ids = body.get("target_ids")
    if ids is not None:
        if target is not None:
            raise ApiError(422, "target_ids", "give target or target_ids, not both")
        if not isinstance(ids, list):
            raise ApiError(422, "target_ids", f"target_ids must be a list of token ids, not {kind(ids)}")
        for i, token in enumerate(ids):
            if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab_size:
                raise ApiError(
                    422, f"target_ids[{i}]", f"target_ids[{i}] = {token!r} is not a token id (0 to {vocab_size - 1})"
                )
    return ExplainRequest(
        source,
        target,
        ids,
        integer(body, "beam_size", 1, limits.max_beam),
        number(body, "alpha", 0.0, limits.max_alpha),
    )


def fields_of(body: Any, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    if not isinstance(body, dict):
        raise ApiError(422, "body", f"the body must be a JSON object, not {kind(body)}")
    for name in required:
        if name not in body:
            raise ApiError(422, name, f"{name} is missing")
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown:
        known = ", ".join(required + optional)
        raise ApiError(422, unknown[0], f"unknown field {unknown[0]!r}; the fields are {known}")


def text(value: Any, name: str, limits: Limits) -> str:
    if not isinstance(value, str):
        raise ApiError(422, name, f"{name} must be a string, not {kind(value)}")
    if len(value) > limits.max_chars:
        raise ApiError(
            422, name, f"{name} has {len(value)} characters, more than this server's limit of {limits.max_chars}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:  # JSON's "\ud800": a lone surrogate, no character
        raise ApiError(422, name, f"{name} is not valid Unicode: a lone surrogate at character {err.start}") from None
    return value


def integer(body: dict, name: str, low: int, high: int, high_is: str | None = None) -> int | None:
    """body[name], an integer in low..high (high_is says what bounds it, where not this server's limit), or None."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(422, name, f"{name} must be an integer, not {kind(value)}")
    if not low <= value <= high:
        bound = f" ({high_is})" if high_is else ""
        raise ApiError(422, name, f"{name} = {value} is out of range: {low} to {high}{bound}")
    return value


def number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ApiError(422, name, f"{name} must be a number, not {kind(value)}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ApiError(422, name, f"{name} = {value} is out of range: {low} to {high}")
    return float(value)


def kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
