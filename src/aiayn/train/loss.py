"""Label-smoothed cross-entropy (§5.4, epsilon_ls = 0.1), padding ignored."""

from __future__ import annotations

import torch
from torch import Tensor


class _SmoothedNLL(torch.autograd.Function):
    """Loss and gradient in a few passes over the (N, V) logits, none of them a log-probability table.

    With q = (1 - eps) onehot(y) + eps / V, the loss of a row is logsumexp(z) - q.z and its
    gradient softmax(z) - q: written out here, it avoids the five or six full-size temporaries
    (log-probabilities, zero-filled and broadcast gradients and their sum) that autograd makes.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
        keep = target != pad_id  # (N,)
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        nll = (lse - logits.gather(1, target[:, None]).squeeze(1)) * keep  # -log p(y)
        uniform = (lse - logits.mean(dim=-1)) * keep  # cross-entropy against the uniform distribution
        ctx.save_for_backward(logits, lse, target, keep)
        ctx.epsilon = epsilon
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return (1.0 - epsilon) * nll_sum + epsilon * uniform.sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        logits, lse, target, keep = ctx.saved_tensors
        eps, V = ctx.epsilon, logits.size(-1)
        grad = torch.sub(logits, lse[:, None]).exp_().sub_(eps / V)  # softmax(z) - eps / V
        grad.scatter_add_(1, target[:, None], torch.full_like(lse[:, None], eps - 1.0))  # - (1 - eps) onehot
        grad.mul_((keep * grad_loss)[:, None])
        return grad, None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor, int]:
    """Summed smoothed loss, summed plain NLL, and the number of non-pad target tokens.

    logits (B, T, V), target (B, T). The reference token gets 1 - epsilon of the probability mass
    plus its share of epsilon spread uniformly over all V classes, as in
    `F.cross_entropy(label_smoothing=epsilon)`. Sums, not means, so that gradient accumulation
    can divide by the tokens of the whole effective batch.
    """
    target = target.flatten()  # (B*T,)
    loss, nll = _SmoothedNLL.apply(logits.float().flatten(0, 1), target, epsilon, pad_id)  # (B*T, V) in
    return loss, nll.detach(), int((target != pad_id).sum())
