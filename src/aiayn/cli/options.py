"""The argparse types of every numeric option: a value out of its range, NaN or infinite is refused at parse time,
with argparse's one-line error naming the flag, before any model is loaded or any work is done.

No command declares a bare `type=int` or `type=float` (tests/test_errors.py walks every option to hold that).
"""

from __future__ import annotations

import argparse
import math


def at_least(low: int, high: int | None = None):
    """An integer >= low (and <= high)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            upper = f" and at most {high}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"must be at least {low}{upper}, got {value}")
        return value

    parse.bounds = (low, high)
    return parse


SEEDS = at_least(0, 2**63 - 1)  # what torch.manual_seed takes
PORTS = at_least(0, 65535)


def number(above: float | None = None, at_most: float | None = None, low: float | None = None):
    """A finite float, above `above` (exclusive) or at least `low` (inclusive), and at most `at_most`."""
    parts = [f"above {above}"] * (above is not None) + [f"at least {low}"] * (low is not None)
    bounds = " and ".join(parts + [f"at most {at_most}"] * (at_most is not None))

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        inside = (
            (above is None or value > above) and (low is None or value >= low) and (at_most is None or value <= at_most)
        )
        if not (math.isfinite(value) and inside):
            raise argparse.ArgumentTypeError(f"must be a finite number {bounds}".rstrip() + f", got {text}")
        return value

    parse.bounds = (above if low is None else low, at_most)
    return parse
