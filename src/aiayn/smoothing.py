"""The arithmetic of §5.4's label-smoothed cross-entropy over a table of logits, a few MiB of rows at a time.

With q = (1 - eps) onehot(y) + eps / V, a row's loss is logsumexp(z) - q.z and its gradient softmax(z) - q.
Written out over row chunks, neither needs a log-probability table nor autograd's full-size temporaries, and
each chunk's passes run in cache. Shared by the paper's loss (aiayn.train.loss) and the CPU's fused one
(aiayn.cpu.fused_loss).
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK_BYTES = 4 << 20  # rows of float32 logits worked on at once on a CPU: a few MiB, so each pass reads cache


def row_chunks(logits: Tensor) -> list[slice]:
    """Slices of about CHUNK_BYTES of float32 rows each, covering the (N, V) logits in order; one slice off a CPU
    (a GPU would pay a dozen kernel launches a chunk, and its reductions may split rows differently by size)."""
    n, v = logits.shape
    if logits.device.type != "cpu":
        return [slice(0, n)]
    rows = max(1, CHUNK_BYTES // (4 * v))
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def smoothed_sums(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, ...]:
    """Summed smoothed loss and plain NLL of the (N, V) logits, with each row's logsumexp (N,) and its pad mask (N,).

    With q = (1 - eps) onehot(y) + eps / V, a row's loss is logsumexp(z) - q.z: (1 - eps) times its NLL plus
    eps times its cross-entropy against the uniform distribution, logsumexp(z) - mean(z). Rows are read a
    chunk at a time, upcast to float32 there.
    """
    keep = target != pad_id  # (N,)
    lse = torch.empty(logits.size(0), dtype=torch.float32, device=logits.device)  # (N,)
    mean = torch.empty_like(lse)  # (N,)
    for rows in row_chunks(logits):
        z = logits[rows].float()  # (n, V)
        torch.logsumexp(z, dim=-1, out=lse[rows])
        torch.mean(z, dim=-1, out=mean[rows])
    gold = logits.gather(1, target[:, None]).squeeze(1).float()  # (N,)
    nll_sum = ((lse - gold) * keep).sum()  # -log p(y), summed
    loss = (1.0 - epsilon) * nll_sum + epsilon * ((lse - mean) * keep).sum()
    return loss, nll_sum, lse, keep


def smoothed_gradient(z: Tensor, lse: Tensor, target: Tensor, epsilon: float, in_place: bool = False) -> Tensor:
    """dL/dz = softmax(z) - q of a chunk of rows z (n, V), given their logsumexp (n,), in float32: fresh, or
    written over z itself when in_place and z is float32 (the same arithmetic either way)."""
    g = z.sub_(lse[:, None]) if in_place and z.dtype == torch.float32 else torch.sub(z.float(), lse[:, None])
    g = g.exp_().sub_(epsilon / z.size(-1))  # softmax(z) - eps / V
    return g.scatter_add_(1, target[:, None], torch.full_like(lse[:, None], epsilon - 1.0))  # - (1 - eps) onehot
