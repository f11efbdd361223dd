"""Ctrl-C during training: finish the step under way, then stop, save and evaluate (§5).

The first SIGINT only sets a flag, which the loop reads at the step boundary, so the checkpoint it
writes records the data position and RNG states of a whole step: interrupted and resumed equals
uninterrupted, bit for bit. A second SIGINT raises KeyboardInterrupt at once (quit without saving).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class StopRequest:
    def __init__(self, log: Callable[[str], None]):
        self.requested, self.log = False, log

    def __call__(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.log("\ninterrupted: finishing this step, then saving a checkpoint and evaluating (Ctrl-C again to quit)")


@contextmanager
def deferred_sigint(log: Callable[[str], None]) -> Iterator[StopRequest]:
    """Within the block, a first Ctrl-C sets `.requested` instead of raising (main thread only)."""
    request = StopRequest(log)
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = signal.signal(signal.SIGINT, request)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous)
