"""Teacher forcing (§3.1, §5): one decoder call scores every position of a known target, exactly what
step-by-step generation computes one call per token; and why the causal mask (§3.2.3) is needed.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..model import Transformer
from ..train.loss import label_smoothed_nll
from ..train.schedule import rate


@torch.no_grad()
def greedy_by_calls(model: Transformer, src: torch.Tensor, max_new: int = 40) -> tuple[list[int], torch.Tensor]:
    """Greedy generation with one full decoder call per new token (no cache): the ids (ending in </s>
    unless cut) and each step's logits of the newest position, (m, V)."""
    cfg = model.config
    ys = torch.tensor([[cfg.bos_id]])  # (1, 1): the start token
    rows = []
    for _ in range(max_new):
        logits = model(src, ys)[0, -1]  # (V,): scores of the next token only
        rows.append(logits.clone())
        banned = logits.clone()
        banned[[cfg.pad_id, cfg.bos_id]] = -math.inf  # never write pad or the start token
        token = int(banned.argmax())
        ys = torch.cat([ys, torch.tensor([[token]])], dim=1)  # the input grows by one
        if token == cfg.eos_id:
            break
    return ys[0, 1:].tolist(), torch.stack(rows)


@torch.no_grad()
def teacher_forcing(model: Transformer, src: torch.Tensor, max_new: int = 40) -> dict[str, Any]:
    """Generate greedily, then score the generated target in one teacher-forced call and compare."""
    model.eval()
    cfg = model.config
    began = time.perf_counter()
    out, step_logits = greedy_by_calls(model, src, max_new)  # m ids, (m, V)
    generation_s = time.perf_counter() - began
    tgt_in = torch.tensor([[cfg.bos_id] + out[:-1]])  # (1, m): shifted right
    began = time.perf_counter()
    logits = model(src, tgt_in)[0]  # (m, V): one row per position
    forcing_s = time.perf_counter() - began
    forced = logits.clone()
    forced[:, [cfg.pad_id, cfg.bos_id]] = -math.inf
    return {
        "tokens": out,
        "calls": len(out),
        "logits_shape": tuple(logits.shape),
        "max_difference": float((logits - step_logits).abs().max()),
        "same_tokens": forced.argmax(-1).tolist() == out,
        "generation_ms": generation_s * 1000,
        "forcing_ms": forcing_s * 1000,
    }


@torch.no_grad()
def loss_by_hand(model: Transformer, src: torch.Tensor, labels: list[int], epsilon: float = 0.1) -> dict[str, Any]:
    """The per-token loss by hand, without and with label smoothing epsilon (§5.4), against PyTorch's
    F.cross_entropy(label_smoothing=epsilon), and p(y_t).

    Smoothed as PyTorch defines it: (1 - epsilon) (-log p(y)) + epsilon * mean over the V classes of (-log p(c)).
    """
    model.eval()
    cfg = model.config
    target = torch.tensor(labels)  # (m,)
    tgt_in = torch.tensor([[cfg.bos_id] + labels[:-1]])  # (1, m)
    logits = model(src, tgt_in)[0].float()  # (m, V)
    logp = torch.log_softmax(logits, dim=-1)  # (m, V)
    right = logp[torch.arange(len(labels)), target]  # (m,): log p of the right token at each position
    smoothed = (1 - epsilon) * -right + epsilon * -logp.mean(dim=-1)  # (m,)
    return {
        "epsilon": epsilon,
        "loss_by_hand": float(-right.mean()),
        "loss_library": float(F.cross_entropy(logits, target)),
        "loss_aiayn": float(label_smoothed_nll(logits[None], target[None], 0.0, cfg.pad_id)[1]) / len(labels),
        "smoothed_by_hand": float(smoothed.mean()),
        "smoothed_library": float(F.cross_entropy(logits, target, label_smoothing=epsilon)),
        "p_right": right.exp().numpy(),
        "top_guess": logp.argmax(-1).tolist(),
    }


@contextlib.contextmanager
def without_causal_mask() -> Iterator[None]:
    """Every decoder self-attention may read every target position (the mask of §3.2.3 removed)."""
    everything = lambda t_q, t_k=None, device=None: torch.ones(  # noqa: E731
        1, 1, t_q, t_q if t_k is None else t_k, dtype=torch.bool, device=device
    )
    patched = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("aiayn.") and hasattr(m, "causal_mask") and m is not sys.modules[__name__]
    ]
    saved = [m.causal_mask for m in patched]
    for m in patched:
        m.causal_mask = everything
    try:
        yield
    finally:
        for m, original in zip(patched, saved):
            m.causal_mask = original


@torch.no_grad()
def reads_the_future(model: Transformer) -> bool:
    """Whether the logits of target position 0 change when a later target token does."""
    model.eval()
    src = torch.tensor([[5, 6, 7, model.config.eos_id]])
    a, b = torch.tensor([[model.config.bos_id, 5, 6]]), torch.tensor([[model.config.bos_id, 5, 9]])
    return not torch.allclose(model(src, a)[0, 0], model(src, b)[0, 0])


def train_briefly(
    model: Transformer,
    pairs: list[tuple[list[int], list[int]]],
    steps: int,
    batch: int = 32,
    seed: int = 0,
    factor: float = 0.5,
) -> np.ndarray:
    """A few Adam steps with eq. 3 on (source ids, target ids) pairs; the loss (nats per token) at each step."""
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    losses = []
    for step in range(1, steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = rate(step, cfg.d_model, warmup_steps=max(steps // 5, 1), factor=factor)
        chosen = [pairs[int(i)] for i in torch.randint(len(pairs), (batch,), generator=gen)]
        src = _pad([s for s, _ in chosen], cfg.pad_id)
        tgt = _pad([t for _, t in chosen], cfg.pad_id)  # (B, T), ending in </s>
        tgt_in = torch.cat([torch.full((batch, 1), cfg.bos_id), tgt[:, :-1]], dim=1)
        loss, _, n = label_smoothed_nll(model(src, tgt_in), tgt, 0.0, cfg.pad_id)  # smoothing 0: the nll
        (loss / n).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()) / int(n))
    model.eval()
    return np.array(losses)


def _pad(seqs: list[list[int]], pad_id: int) -> torch.Tensor:
    longest = max(len(s) for s in seqs)
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)


def token_accuracy(model: Transformer, pairs: list[tuple[list[int], list[int]]]) -> float:
    """The share of target tokens that greedy generation writes in the right place (pairs of ids)."""
    right = total = 0
    for src, tgt in pairs:
        out, _ = greedy_by_calls(model, torch.tensor([src]), max_new=len(tgt))
        right += sum(a == b for a, b in zip(out, tgt))
        total += len(tgt)
    return right / max(total, 1)


@torch.no_grad()
def held_out_loss(model: Transformer, pairs: list[tuple[list[int], list[int]]]) -> float:
    """Teacher-forced loss in nats per token on pairs the model never trained on."""
    cfg = model.config
    src, tgt = _pad([s for s, _ in pairs], cfg.pad_id), _pad([t for _, t in pairs], cfg.pad_id)
    tgt_in = torch.cat([torch.full((len(pairs), 1), cfg.bos_id), tgt[:, :-1]], dim=1)
    loss, _, n = label_smoothed_nll(model(src, tgt_in), tgt, 0.0, cfg.pad_id)
    return float(loss) / int(n)


def mask_experiment(
    config,
    train: list[tuple[list[int], list[int]]],
    held_out: list[tuple[list[int], list[int]]],
    steps: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The same model trained with and without the causal mask: training loss, held-out teacher-forced
    loss, and the share of held-out tokens that greedy generation gets right."""
    result: dict[str, Any] = {}
    for name, masked in (("masked", True), ("unmasked", False)):
        torch.manual_seed(seed)
        model = Transformer(config)
        with contextlib.nullcontext() if masked else without_causal_mask():
            result[f"{name}_reads_future"] = reads_the_future(model)
            result[f"{name}_loss"] = train_briefly(model, train, steps, seed=seed)
            result[f"{name}_held_out_loss"] = held_out_loss(model, held_out)
            result[f"{name}_accuracy"] = token_accuracy(model, held_out)
    return result


@torch.no_grad()
def shift_right(model: Transformer, src: list[int], target: list[int]) -> dict[str, Any]:
    """The decoder's input is the target shifted right by one (<s> first, the last token dropped; §3.1's "output
    embeddings are offset by one position"), so output i, which predicts target i, reads only targets < i: a change
    of target j moves no logit at positions <= j and moves those after it."""
    cfg = model.config
    model.eval()
    if len(target) < 2:
        raise ValueError(f"the target has {len(target)} piece(s); shifting needs 2 or more")
    tgt_in = [cfg.bos_id] + target[:-1]
    j = len(target) // 2 - 1  # target j sits at decoder input j + 1, which exists
    changed = list(tgt_in)
    changed[j + 1] = next(t for t in range(cfg.target_vocab_size) if t not in (tgt_in[j + 1], cfg.pad_id, cfg.bos_id))
    logits = model(torch.tensor([src]), torch.tensor([tgt_in]))[0]  # (m, V)
    after = model(torch.tensor([src]), torch.tensor([changed]))[0]
    moved = (after - logits).abs().amax(dim=-1)  # (m,): how far each position's logits moved
    return {
        "target": target,
        "decoder_input": tgt_in,
        "changed": j,
        "earlier": float(moved[: j + 1].max()),
        "later": float(moved[j + 1 :].min()) if j + 1 < len(target) else 0.0,
        "moved": moved.numpy(),
    }
