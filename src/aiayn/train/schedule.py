"""The learning-rate schedule of §5.3, eq. (3)."""

from __future__ import annotations


def rate(step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), eq. (3).

    Linear warm-up for warmup_steps, then inverse-square-root decay. `factor` is 1 in the paper;
    reimplementations that train with smaller batches than the paper's scale it (e.g. 2).
    Steps count from 1; step 0 is treated as step 1.
    """
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
