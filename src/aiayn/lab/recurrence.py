"""A recurrent layer against a self-attention layer (§1, §4): sequential steps against one product.

The recurrence h_t = f(h_{t-1}, x_t) of §1 must run its n steps in order; attention (eq. 1) computes
every row from the inputs alone. The functions below measure both, with the library as reference.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


def scalar_trace(w: float = 0.5, u: float = 1.0, h0: float = 0.0, steps: int = 6) -> np.ndarray:
    """h_t = tanh(w h_{t-1} + u x_t) with x_1 = 1 and x_t = 0 after: the trace of word 1, (steps,)."""
    h, trace = h0, []
    for t in range(steps):
        h = math.tanh(w * h + u * (1.0 if t == 0 else 0.0))
        trace.append(h)
    return np.array(trace)


def rnn_loop(x: Tensor, rnn: nn.RNN) -> Tensor:
    """The recurrent layer written as the loop it is, with nn.RNN's weights: (B, n, d) -> (B, n, d)."""
    h = x.new_zeros(x.size(0), rnn.hidden_size)  # h_0: (B, d)
    states = []
    for t in range(x.size(1)):  # step t needs the h of step t - 1
        h = torch.tanh(x[:, t] @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ rnn.weight_hh_l0.T + rnn.bias_hh_l0)
        states.append(h)
    return torch.stack(states, 1)


def gru_loop(x: Tensor, gru: nn.GRU) -> Tensor:
    """nn.GRU's layer as a loop of GRUCell steps with the same weights: (B, n, d) -> (B, n, d)."""
    cell = nn.GRUCell(gru.input_size, gru.hidden_size)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(gru, f"{name}_l0"))
    h = x.new_zeros(x.size(0), gru.hidden_size)
    states = []
    for t in range(x.size(1)):
        h = cell(x[:, t], h)
        states.append(h)
    return torch.stack(states, 1)


def attention_layer(x: Tensor) -> Tensor:
    """Eq. 1 with Q = K = V = X and no learned weights: (B, n, d) -> (B, n, d), all rows at once."""
    scores = x @ x.transpose(1, 2) / math.sqrt(x.size(-1))  # (B, n, n): every word against every word
    return torch.softmax(scores, dim=-1) @ x


def attention_row(x: Tensor, row: int) -> Tensor:
    """Row `row` of attention_layer(x) computed alone, from X only: (B, d)."""
    scores = x[:, row : row + 1] @ x.transpose(1, 2) / math.sqrt(x.size(-1))  # (B, 1, n)
    return (torch.softmax(scores, dim=-1) @ x)[:, 0]


class Agreement(NamedTuple):
    """How far each hand-written layer is from the library, and row 7 alone from the full product."""

    rnn_vs_library: float  # max |rnn_loop - nn.RNN|
    attention_vs_sdpa: float  # max |attention_layer - F.scaled_dot_product_attention|
    gru_vs_library: float  # max |gru_loop - nn.GRU|
    row7_alone: float  # max |attention_row(x, 7) - attention_layer(x)[:, 7]|


@torch.no_grad()
def agreement(batch: int = 32, n: int = 12, d: int = 512, seed: int = 0) -> Agreement:
    """Check both methods on the same X (batch, n, d): hand loops against nn.RNN / nn.GRU, eq. 1 against SDPA."""
    torch.manual_seed(seed)
    x = torch.randn(batch, n, d)
    rnn, gru = nn.RNN(d, d, batch_first=True), nn.GRU(d, d, batch_first=True)
    attn = attention_layer(x)
    return Agreement(
        rnn_vs_library=float((rnn_loop(x, rnn) - rnn(x)[0]).abs().max()),
        attention_vs_sdpa=float((attn - F.scaled_dot_product_attention(x, x, x)).abs().max()),
        gru_vs_library=float((gru_loop(x, gru) - gru(x)[0]).abs().max()),
        row7_alone=float((attention_row(x, 7) - attn[:, 7]).abs().max()),
    )


@torch.no_grad()
def change_one_word(word: int = 3, batch: int = 32, n: int = 12, d: int = 512, seed: int = 0) -> dict[str, np.ndarray]:
    """Change word `word` only; the largest change of each output 0..n-1 for the RNN and attention: (n,) each.

    Small word vectors keep the attention weights spread out (as in the explanation's run).
    """
    torch.manual_seed(seed)
    x = 0.05 * torch.randn(batch, n, d)
    x2 = x.clone()
    x2[:, word] += 0.05
    rnn = nn.RNN(d, d, batch_first=True)
    move = {
        "rnn": (rnn_loop(x2, rnn) - rnn_loop(x, rnn)).abs().amax(dim=(0, 2)),
        "attention": (attention_layer(x2) - attention_layer(x)).abs().amax(dim=(0, 2)),
    }
    return {name: m.numpy() for name, m in move.items()}


def fastest_ms(f: Callable[[], object], repeats: int = 5) -> float:
    """The fastest of `repeats` runs after one warm-up, in milliseconds (a slow run is usually noise)."""
    f()
    best = math.inf
    for _ in range(repeats):
        began = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - began)
    return best * 1000


@torch.no_grad()
def timings(
    lengths: tuple[int, ...] = (16, 64, 256, 1024), batch: int = 32, d: int = 512, repeats: int = 5, seed: int = 0
) -> dict[str, np.ndarray]:
    """Forward time in ms per length n, (len(lengths),) each: the loops, the libraries, the attentions.

    Keys: rnn_loop, rnn (nn.RNN), attention (eq. 1 by hand), sdpa, gru_loop, gru (nn.GRU),
    mha (nn.MultiheadAttention, 8 heads, learned projections).
    """
    torch.manual_seed(seed)
    rnn, gru = nn.RNN(d, d, batch_first=True), nn.GRU(d, d, batch_first=True)
    mha = nn.MultiheadAttention(d, 8, batch_first=True)
    runs: dict[str, list[float]] = {}
    for n in lengths:
        x = torch.randn(batch, n, d)
        cases = {
            "rnn_loop": lambda: rnn_loop(x, rnn),
            "rnn": lambda: rnn(x),
            "attention": lambda: attention_layer(x),
            "sdpa": lambda: F.scaled_dot_product_attention(x, x, x),
            "gru_loop": lambda: gru_loop(x, gru),
            "gru": lambda: gru(x),
            "mha": lambda: mha(x, x, x, need_weights=False),
        }
        for name, f in cases.items():
            runs.setdefault(name, []).append(fastest_ms(f, repeats))
    return {name: np.array(ms) for name, ms in runs.items()}


def gradient_by_distance(n: int = 64, d: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    """The norm of d(sum of the last output)/d(input at distance k back), k = 0 .. n-1, through a tanh RNN, a GRU
    and a self-attention layer (nn.MultiheadAttention, 4 heads) of width d with PyTorch's initial weights: the
    vanishing gradient of recurrence against attention's path of length 1 (§4). (n,) each."""
    torch.manual_seed(seed)
    layers = {
        "rnn": nn.RNN(d, d, batch_first=True),
        "gru": nn.GRU(d, d, batch_first=True),
        "attention": nn.MultiheadAttention(d, 4, batch_first=True),
    }
    x = torch.randn(1, n, d, requires_grad=True)
    out = {}
    for name, layer in layers.items():
        y = layer(x, x, x)[0] if name == "attention" else layer(x)[0]  # (1, n, d)
        (grad,) = torch.autograd.grad(y[0, -1].sum(), x)  # (1, n, d)
        out[name] = grad[0].norm(dim=-1).flip(0).numpy()  # index k: the input k positions before the last
    return out
