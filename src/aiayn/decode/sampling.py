"""Sampling instead of search: temperature, top-k and top-p (nucleus) filtering. Not in the paper.

Each step draws the next token from softmax(logits / temperature), restricted to the k most
probable tokens (top_k > 0) and to the smallest set whose probability reaches top_p (top_p < 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model import Transformer
from .beam import Hypothesis, length_penalty
from .step import StepModel, as_step_model, ban, drop_ended, search_limits


def filter_log_probs(log_probs: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """(N, V) log-probabilities -> the log-probabilities of the distribution to sample from."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    scores = log_probs / temperature
    if 0 < top_k < scores.size(-1):
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        scores = scores.masked_fill(scores < kth, -math.inf)
    if top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        mass_before = sorted_scores.softmax(dim=-1).cumsum(dim=-1) - sorted_scores.softmax(dim=-1)
        drop = mass_before >= top_p  # keep a token while the mass before it is below top_p
        scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, -math.inf))
    return scores.log_softmax(dim=-1)


@torch.inference_mode()
def sample(
    model: Transformer | StepModel, src: Tensor, config: DecodeConfig = DecodeConfig(),
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """One sampled translation of each sentence of src (B, S), scored by the (unfiltered) model."""
    step = as_step_model(model)
    limits = search_limits(step, src, config)
    B = src.size(0)
    cache = step.start(src)
    tokens = torch.full((B, 1), step.bos_id, dtype=torch.long, device=src.device)
    alive = torch.arange(B, device=src.device)
    out: list[list[int]] = [[] for _ in range(B)]
    log_prob = [0.0] * B
    for t in range(int(limits.max())):
        log_probs, cache = step.step(tokens, cache)  # (B', V)
        ban(log_probs, step)
        dist = filter_log_probs(log_probs, config.temperature, config.top_k, config.top_p).exp()
        tokens = torch.multinomial(dist, 1, generator=generator)  # (B', 1)
        chosen = log_probs.gather(1, tokens)[:, 0].tolist()
        for row, (b, tok) in enumerate(zip(alive.tolist(), tokens[:, 0].tolist())):
            out[b].append(tok)
            log_prob[b] += chosen[row]
        ended = (tokens[:, 0] == step.eos_id) | (t + 1 >= limits[alive])
        if ended.any():
            rest = drop_ended(ended, alive, tokens, cache)
            if rest is None:
                break
            alive, tokens, cache = rest
    lp = [length_penalty(config.alpha, float(len(o)), config.length_penalty) for o in out]
    return [[Hypothesis(o, lp_sum / p, lp_sum)] for o, lp_sum, p in zip(out, log_prob, lp)]
