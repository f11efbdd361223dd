"""Ctrl-C during training: finish the step under way, then stop, save and evaluate (§5).

The first SIGINT only sets a flag, which the loop reads at the step boundary, so the checkpoint it
writes records the data position and RNG states of a whole step: interrupted and resumed equals
uninterrupted, bit for bit. A second SIGINT raises KeyboardInterrupt at once (quit without saving).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StopRequest:
    """The SIGINT handler: only sets a flag (printing from a signal handler could re-enter a write)."""

    def __init__(self):
        self.requested = False

    def __call__(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


@contextmanager
def deferred_sigint() -> Iterator[StopRequest]:
    """Within the block, a first Ctrl-C sets `.requested` instead of raising (main thread only)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = signal.signal(signal.SIGINT, request)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous)
