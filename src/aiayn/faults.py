"""Named fault points: where a test may make the process die, to prove that a rerun recovers.

    AIAYN_FAULT=checkpoint.after-weights       die at the first time that point is reached
    AIAYN_FAULT=checkpoint.after-weights@3     at the third time
    AIAYN_FAULT_SIGNAL=INT                     send SIGINT there instead (Ctrl-C), and go on

A process that dies at a point prints `aiayn fault: NAME` on stderr and kills itself with SIGKILL, as
`kill -9` or a lost machine would: no `finally`, no buffered file flushed. Given `partial=path`, the
file is first cut to half its length, as a kill during its write would leave it. Unset, a point
costs one dictionary lookup. Every point is named in POINTS (docs/robustness.md lists what each
proves); tests/test_faults.py runs the tiny recipe through each.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

POINTS = (
    "run.after-lock",
    "run.after-record",
    "vocab.before-train",
    "vocab.after-train",
    "vocab.partial",
    "vocab.before-rename",
    "store.after-chunk",
    "store.before-meta",
    "store.after-prepare",
    "train.after-backward",
    "train.after-step",
    "checkpoint.after-model",
    "checkpoint.after-state-tensors",
    "checkpoint-state.partial",
    "checkpoint-state.before-rename",
    "checkpoint.before-rename",
    "checkpoint.after-rename",
    "checkpoint.after-prune-one",
    "average.after-mean",
    "average.partial",
    "average.before-rename",
    "average.after-weights",
    "final.after-average",
    "results.partial",
    "results.before-rename",
    "final.after-results",
)

_counts: dict[str, int] = {}


def _armed() -> tuple[str, int] | None:
    spec = os.environ.get("AIAYN_FAULT")
    if not spec:
        return None
    name, _, nth = spec.partition("@")
    return name, int(nth or 1)


def point(name: str, partial: str | Path | None = None) -> None:
    """A fault point: die here (or send the signal AIAYN_FAULT_SIGNAL names) when AIAYN_FAULT names it."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] != armed[1]:
        return
    if partial is not None:
        path = Path(partial)
        os.truncate(path, path.stat().st_size // 2)
    print(f"aiayn fault: {name}", file=sys.stderr, flush=True)
    sig = os.environ.get("AIAYN_FAULT_SIGNAL")
    if sig:
        os.kill(os.getpid(), getattr(signal, "SIG" + sig.removeprefix("SIG")))
        return
    os.kill(os.getpid(), signal.SIGKILL)
