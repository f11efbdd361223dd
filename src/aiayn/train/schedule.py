"""The learning-rate schedule of §5.3, eq. (3), and an optional cool-down at the end of a run.

Eq. (3) warms up linearly for warmup_steps, then decays as the inverse square root of the step; it
never reaches zero, and the paper ends its runs by averaging the last checkpoints (§6.1). A run of
fixed length can instead end with the rate falling linearly to zero over its last steps (a
"cool-down"; not in the paper): `cooldown` is that share of the run's steps. With a time budget
(train.max_minutes) the number of steps that fit is planned from the run's speed (`plan_steps`):
first after PLAN_AFTER of the budget, then again at each checkpoint until the cool-down begins
(the rate is eq. (3)'s until then, whatever the plan; a new plan never begins the cool-down before
the step it is made at, `shortest_run`), and kept in the checkpoints, so a resumed run goes on with
it. The run ends at the planned step, or at the budget if that comes first.
"""

from __future__ import annotations

import math

PLAN_AFTER = 0.05  # a time-limited run plans its steps once this share of the budget has passed
MIN_PLAN_STEPS = 10  # and this many steps after the process's first
PLAN_MARGIN = 0.02  # and plans for this much less time than is left, for the speed to vary


def rate(
    step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0, total_steps: int = 0, cooldown: float = 0.0
) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), eq. (3), then the cool-down.

    Linear warm-up for warmup_steps, then inverse-square-root decay. `factor` is 1 in the paper;
    reimplementations that train with smaller batches than the paper's scale it (e.g. 2).
    Steps count from 1; step 0 is treated as step 1. With total_steps and cooldown > 0, the last
    round(cooldown x total_steps) steps multiply eq. (3) by a factor falling linearly from 1 to
    1 / (their number + 1) at the last step.
    """
    step = max(step, 1)
    lr = factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
    return lr * cooldown_factor(step, total_steps, cooldown)


def cooldown_begins(total_steps: int, cooldown: float) -> int:
    """The last step before the cool-down of a run of total_steps: total_steps less round(cooldown x total_steps)."""
    return total_steps - round(cooldown * total_steps)


def cooldown_factor(step: int, total_steps: int, cooldown: float) -> float:
    """1 before the cool-down; (total_steps - step + 1) / (n + 1) within its last n steps."""
    begins = cooldown_begins(total_steps, cooldown) if total_steps > 0 else total_steps
    if begins == total_steps or step <= begins:
        return 1.0
    return max(total_steps - step + 1, 0) / (total_steps - begins + 1)


def plan_steps(step: int, seconds: float, budget_seconds: float, max_steps: int) -> int:
    """The steps a time budget holds at the speed so far (step steps in seconds), less PLAN_MARGIN; at most max_steps."""
    planned = math.floor(step * budget_seconds * (1 - PLAN_MARGIN) / max(seconds, 1e-9))
    return max(step, min(planned, max_steps))


def shortest_run(step: int, cooldown: float) -> int:
    """The fewest steps N whose cool-down (the last round(cooldown x N)) begins after `step`."""
    n = max(
        step, math.ceil((step - 0.5) / (1 - cooldown)) - 1
    )  # below the answer: n - round(c n) >= step needs n >= that
    while cooldown_begins(n, cooldown) < step:
        n += 1
    return n
