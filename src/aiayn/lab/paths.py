"""Table 1, measured (§4): sequential operations and path lengths of five layer types, and per-layer FLOPs.

Each layer type is a dependency graph over n positions: `predecessors(kind, t, layer, ...)` lists the
positions of the layer below that output t reads. The measures are counted on that graph:
- sequential operations: the longest chain of computations inside one layer that must run in order;
- path length between positions i and j: the fewest operations a signal from input i passes through
  to reach an output at j, one operation per layer climbed and one per recurrent step (the step that
  reads x_i is step 0, so a recurrent layer carries x_i to h_(i+d) in d steps).
The convolutions are causal (they read positions t and before), as in ConvS2S's decoder.
"""

from __future__ import annotations

import math

import numpy as np
import torch

KINDS = ("self-attention", "recurrent", "convolutional", "dilated", "restricted")
ORDERS = {  # Table 1's maximum path length
    "self-attention": "O(1)",
    "recurrent": "O(n)",
    "convolutional": "O(n/k)",
    "dilated": "O(log_k n)",
    "restricted": "O(n/r)",
}


def predecessors(kind: str, t: int, layer: int, n: int, k: int = 3, r: int = 4) -> range | list[int]:
    """Positions of the layer below that output t of layer `layer` (0-based) reads."""
    if kind == "self-attention":
        return range(n)
    if kind == "restricted":  # a neighbourhood of r positions either side
        return range(max(0, t - r), min(n, t + r + 1))
    if kind == "convolutional":  # kernel k, causal
        return range(max(0, t - k + 1), t + 1)
    if kind == "dilated":  # kernel k, dilation k^layer: reach k^L - 1 after L layers
        step = k**layer
        return [t - m * step for m in range(k) if t - m * step >= 0]
    if kind == "recurrent":
        return [t]  # x_t; h_(t-1) comes from the same layer
    raise ValueError(f"unknown layer kind {kind!r}; choose from {', '.join(KINDS)}")


def distances(kind: str, n: int, i: int, layers: int, k: int = 3, r: int = 4) -> np.ndarray:
    """Fewest operations from input position i to every node (layer, position): (layers + 1, n).

    Row 0 is the input; inf where the signal cannot reach.
    """
    dist = np.full((layers + 1, n), np.inf)
    dist[0, i] = 0
    for layer in range(1, layers + 1):
        below = dist[layer - 1]
        for t in range(n):
            reach = min(below[p] for p in predecessors(kind, t, layer - 1, n, k, r))
            if kind == "recurrent":  # h_t = f(h_(t-1), x_t): reading x_t is step 0, each h_(t-1) -> h_t a step
                prev = dist[layer, t - 1] + 1 if t > 0 else np.inf
                dist[layer, t] = min(reach, prev)
            else:
                dist[layer, t] = reach + 1
    return dist


def path_length(kind: str, d: int, k: int = 3, r: int = 4) -> int:
    """The fewest operations between positions 0 and d, over a stack as deep as it needs to be."""
    n = d + 1
    dist = distances(kind, n, 0, 1, k, r)  # (2, n)
    while not np.isfinite(dist[-1, d]):  # climb one more layer (never for a recurrent layer)
        top = dist.shape[0] - 1
        row = [min(dist[top, p] for p in predecessors(kind, t, top, n, k, r)) + 1 for t in range(n)]
        dist = np.vstack([dist, row])
    return int(dist[1:, d].min())


def sequential_operations(kind: str, n: int) -> int:
    """The longest chain inside one layer: n for the recurrence (h_t waits for h_(t-1)), 1 otherwise."""
    predecessors(kind, 0, 0, n)  # checks the kind
    chain = [1] * n  # longest chain ending at each position of the layer
    for t in range(1, n):
        if kind == "recurrent":  # the only within-layer edge: h_(t-1) -> h_t
            chain[t] = chain[t - 1] + 1
    return max(chain)


def exact_path_length(kind: str, d: int, k: int = 3, r: int = 4) -> int:
    """The closed forms: d, ceil(d / (k - 1)), ceil(log_k(d + 1)), 1, ceil(d / r)."""
    return {
        "self-attention": 1,
        "recurrent": d,
        "convolutional": math.ceil(d / (k - 1)),
        "dilated": math.ceil(math.log(d + 1, k) - 1e-12),
        "restricted": math.ceil(d / r),
    }[kind]


def layer_flops(lengths: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """FLOPs of one self-attention layer (Q K^T and the weighted sum: 4 n^2 d) and one recurrent layer
    (h W and x U per step: 4 n d^2), counted by torch's FLOP counter on eq. 1 and the loop; (len,) each."""
    from torch.utils.flop_counter import FlopCounterMode

    from .recurrence import attention_layer

    counts: dict[str, list[int]] = {"self-attention": [], "recurrent": []}
    for n in lengths:
        x, w, u = torch.zeros(1, int(n), d), torch.zeros(d, d), torch.zeros(d, d)
        for name, f in (
            ("self-attention", lambda: attention_layer(x)),
            ("recurrent", lambda: [x[:, t] @ u + x[:, t] @ w for t in range(int(n))]),
        ):
            with FlopCounterMode(display=False) as counter:
                f()
            counts[name].append(counter.get_total_flops())
    return {name: np.array(c, dtype=np.float64) for name, c in counts.items()}


# Matrix products of one recurrent step, as (x W + h U) per gate: a tanh RNN has one gate, a GRU three, an LSTM four.
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def whole_layer_flops(n: int, d: int, d_ff: int) -> dict[str, int]:
    """FLOPs (2 per multiply-add) of whole layers over n positions of width d, beyond Table 1's attention term:
    the attention sub-layer with its projections (Q, K, V and W^O: 8 n d^2, plus QK^T and the weighted sum:
    4 n^2 d), the FFN (4 n d d_ff, §3.3), and recurrent layers of each kind (4 n d^2 per gate)."""
    out = {"attention": 8 * n * d * d + 4 * n * n * d, "ffn": 4 * n * d * d_ff}
    out.update({kind: 4 * gates * n * d * d for kind, gates in GATES.items()})
    return out


def cheaper_below(kind: str, d: int, d_ff: int, lengths: list[int]) -> list[int]:
    """The lengths n at which the attention sub-layer (projections included) costs fewer FLOPs than a recurrent
    layer of the kind."""
    return [n for n in lengths if whole_layer_flops(n, d, d_ff)["attention"] < whole_layer_flops(n, d, d_ff)[kind]]


def share_shorter(lengths: list[int], d: int) -> float:
    """The share of sentences of the given lengths (in pieces) with n < d: where §4 says attention is cheaper."""
    return sum(n < d for n in lengths) / max(1, len(lengths))
