"""Label-smoothed cross-entropy (§5.4, epsilon_ls = 0.1), padding ignored."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor, int]:
    """Summed smoothed loss, summed plain NLL, and the number of non-pad target tokens.

    logits (B, T, V), target (B, T). The reference token gets 1 - epsilon of the probability mass
    plus its share of epsilon spread uniformly over all V classes, as in
    `F.cross_entropy(label_smoothing=epsilon)`. Sums, not means, so that gradient accumulation
    can divide by the tokens of the whole effective batch.
    """
    logp = F.log_softmax(logits.float(), dim=-1).flatten(0, 1)  # (B*T, V)
    target = target.flatten()  # (B*T,)
    keep = target != pad_id
    # Pads are masked, not indexed away: selecting rows would copy the (B*T, V) table (~30% slower).
    nll = F.nll_loss(logp, target, ignore_index=pad_id, reduction="sum")
    uniform = -(logp.sum(dim=-1) * keep).sum() / logp.size(-1)  # cross-entropy against the uniform distribution
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    return loss, nll.detach(), int(keep.sum())
