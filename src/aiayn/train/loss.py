"""Label-smoothed cross-entropy (§5.4, epsilon_ls = 0.1), padding ignored.

The training step on a CPU computes the same loss fused with the pre-softmax projection over a kept table
(aiayn.cpu.fused_loss); tests/test_train.py holds the two equal.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..smoothing import row_chunks, smoothed_gradient, smoothed_sums


class _SmoothedNLL(torch.autograd.Function):
    """Loss and gradient in a few passes over the (N, V) logits, none of them a log-probability table.

    With q = (1 - eps) onehot(y) + eps / V, the loss of a row is logsumexp(z) - q.z and its
    gradient softmax(z) - q: written out here, it avoids the five or six full-size temporaries
    (log-probabilities, zero-filled and broadcast gradients and their sum) that autograd makes.
    The rows are taken a few MiB at a time, upcast to float32 there (bf16 logits under autocast stay
    bf16 in memory, and their gradient is written in bf16, as autograd's cast back would), so the
    passes run in cache (docs/studies/training-speed.md). Each row's arithmetic is the same as in one piece.
    Other devices take the table in one piece.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
        loss, nll_sum, lse, keep = smoothed_sums(logits, target, epsilon, pad_id)
        ctx.save_for_backward(logits, lse, target, keep)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll_sum)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        logits, lse, target, keep = ctx.saved_tensors
        scale = (keep * grad_loss)[:, None]  # (N, 1)
        grad = torch.empty_like(logits)  # (N, V), the logits' dtype
        for rows in row_chunks(logits):
            grad[rows] = smoothed_gradient(logits[rows], lse[rows], target[rows], ctx.epsilon).mul_(scale[rows])
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


PRODUCT_ROWS = 256  # rows of the projection multiplied at once on a CPU, straight into the kept table
