"""When a run stops, and how far it is: the nearest of max_steps, max_minutes and max_epochs (§5.2).

A run stops at the first limit it reaches; its progress bar counts toward that one: the seconds
of a time-limited run (of max_minutes x 60), else the steps or epochs, whichever is nearer its end.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

from tqdm import tqdm

from ..recipe import TrainConfig

BAR_FORMAT = "{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}{postfix}]"


class Limit(NamedTuple):
    done: float  # steps, seconds or epochs so far
    total: float  # the limit
    unit: str  # "steps", "s" or "epochs"

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total > 0 else math.inf


def nearest_limit(t: TrainConfig, step: int, seconds: float, epochs: float) -> Limit:
    """The limit the run is nearest to reaching: max_steps, max_minutes (if set) or max_epochs (if set)."""
    limits = []  # on a tie (at the start) the first wins: time, then epochs, then steps
    if t.max_minutes > 0:
        limits.append(Limit(seconds, t.max_minutes * 60, "s"))
    if t.max_epochs > 0:
        limits.append(Limit(epochs, t.max_epochs, "epochs"))
    limits.append(Limit(step, t.max_steps, "steps"))
    return max(limits, key=lambda limit: limit.fraction)


def stop(t: TrainConfig, step: int, seconds: float, epochs: float) -> bool:
    """True once a limit is reached; `epochs` counts finished epochs with the fraction of the current one."""
    return nearest_limit(t, step, seconds, epochs).fraction >= 1


def _shown(limit: Limit) -> tuple[float, float]:
    """(done, total) as the bar prints them: whole steps and seconds, epochs to 2 decimals. A run stops at the first
    step boundary past its time limit, so its seconds overshoot: they show as the limit (tqdm would print a count
    past its total as an unknown total, "0%| 246/? s")."""
    if limit.unit == "epochs":
        return min(round(limit.done, 2), limit.total), limit.total
    return min(math.floor(limit.done), round(limit.total)), round(limit.total)


class ProgressBar:
    """A tqdm bar toward the nearest limit, with the step and the caller's numbers after it."""

    def __init__(self, t: TrainConfig, step: int, seconds: float, epochs: float, disable: bool = False, file=None):
        self.train = t
        limit = nearest_limit(t, step, seconds, epochs)
        self.unit = limit.unit
        done, total = _shown(limit)
        self.bar = tqdm(
            initial=done,
            total=total,
            unit=limit.unit,
            bar_format=BAR_FORMAT,
            disable=disable,
            dynamic_ncols=True,
            file=file,
            mininterval=1.0 if sys.stderr.isatty() else 60.0,
        )

    def update(self, step: int, seconds: float, epochs: float, **numbers: str) -> None:
        bar = self.bar
        if bar.disable:  # not rank 0
            return
        limit = nearest_limit(self.train, step, seconds, epochs)
        done, total = _shown(limit)
        postfix = {"step": f"{step:,}", **numbers}
        if limit.unit != self.unit:  # another limit came nearer: count toward that one from here
            self.unit = bar.unit = limit.unit
            bar.reset(total=total)  # its rate and time left start afresh
            bar.n = bar.last_print_n = done
            bar.set_postfix(postfix)  # and print
            return
        bar.set_postfix(postfix, refresh=False)
        bar.update(done - bar.n)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # on errors too
