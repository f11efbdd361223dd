"""Label-smoothed cross-entropy (§5.4, epsilon_ls = 0.1), padding ignored.

The training loop's step on a CPU computes the same loss fused with the projection (aiayn.cpu.fused_loss).
"""

from __future__ import annotations

from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor, int]:
    """Summed smoothed loss, summed plain NLL, and the number of non-pad target tokens.

    logits (B, T, V), target (B, T). The reference token gets 1 - epsilon of the probability mass plus its share
    of epsilon spread uniformly over all V classes, as in `F.cross_entropy(label_smoothing=epsilon)`: with
    q = (1 - eps) onehot(y) + eps / V, a position's loss is logsumexp(z) - q.z, that is (1 - eps) times its NLL
    plus eps times its cross-entropy against the uniform distribution, logsumexp(z) - mean(z). Sums, not means,
    so that gradient accumulation can divide by the tokens of the whole effective batch. Computed in float32
    whatever the logits' dtype.
    """
    z = logits.flatten(0, 1).float()  # (N, V)
    target = target.flatten()  # (N,)
    keep = target != pad_id  # (N,)
    lse = z.logsumexp(dim=-1)  # (N,)
    gold = z.gather(1, target[:, None]).squeeze(1)  # (N,)
    nll_sum = ((lse - gold) * keep).sum()  # -log p(y), summed
    loss = (1.0 - epsilon) * nll_sum + epsilon * ((lse - z.mean(dim=-1)) * keep).sum()
    return loss, nll_sum.detach(), int(keep.sum())
