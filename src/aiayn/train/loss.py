"""Label-smoothed cross-entropy (§5.4, epsilon_ls = 0.1), padding ignored."""

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


class _SmoothedNLL(torch.autograd.Function):
    """Loss and gradient in a few passes over the (N, V) logits, none of them a log-probability table.

    With q = (1 - eps) onehot(y) + eps / V, the loss of a row is logsumexp(z) - q.z and its
    gradient softmax(z) - q: written out here, it avoids the five or six full-size temporaries
    (log-probabilities, zero-filled and broadcast gradients and their sum) that autograd makes.
    The rows are taken a few MiB at a time, upcast to float32 there (bf16 logits under autocast stay
    bf16 in memory, and their gradient is written in bf16, as autograd's cast back would), so the
    passes run in cache: on a CPU a (3,744 x 8,000) table in one piece cost more than the products
    that made it (docs/training.md). Each row's arithmetic is the same as in one piece. Other devices take
    the table in one piece.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
        keep = target != pad_id  # (N,)
        lse = torch.empty(logits.size(0), dtype=torch.float32, device=logits.device)  # (N,)
        mean = torch.empty_like(lse)  # (N,)
        for rows in row_chunks(logits):
            z = logits[rows].float()  # (n, V)
            torch.logsumexp(z, dim=-1, out=lse[rows])
            torch.mean(z, dim=-1, out=mean[rows])
        gold = logits.gather(1, target[:, None]).squeeze(1).float()  # (N,)
        nll = (lse - gold) * keep  # -log p(y)
        uniform = (lse - mean) * keep  # cross-entropy against the uniform distribution
        ctx.save_for_backward(logits, lse, target, keep)
        ctx.epsilon = epsilon
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return (1.0 - epsilon) * nll_sum + epsilon * uniform.sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        logits, lse, target, keep = ctx.saved_tensors
        eps, V = ctx.epsilon, logits.size(-1)
        scale = (keep * grad_loss)[:, None]  # (N, 1)
        grad = torch.empty_like(logits)  # (N, V), the logits' dtype
        for rows in row_chunks(logits):
            g = torch.sub(logits[rows].float(), lse[rows, None]).exp_().sub_(eps / V)  # softmax(z) - eps / V
            g.scatter_add_(1, target[rows, None], torch.full_like(lse[rows, None], eps - 1.0))  # - (1 - eps) onehot
            grad[rows] = g.mul_(scale[rows])
        return grad, None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor, int]:
    """Summed smoothed loss, summed plain NLL, and the number of non-pad target tokens.

    logits (B, T, V), target (B, T). The reference token gets 1 - epsilon of the probability mass
    plus its share of epsilon spread uniformly over all V classes, as in
    `F.cross_entropy(label_smoothing=epsilon)`. Sums, not means, so that gradient accumulation
    can divide by the tokens of the whole effective batch. The loss is computed in float32 whatever
    the logits' dtype.
    """
    target = target.flatten()  # (B*T,)
    loss, nll = _SmoothedNLL.apply(logits.flatten(0, 1), target, epsilon, pad_id)  # (B*T, V) in
    return loss, nll.detach(), int((target != pad_id).sum())
