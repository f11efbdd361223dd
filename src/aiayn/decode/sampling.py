"""Sampling instead of search: temperature, top-k and top-p (nucleus) filtering. Not in the paper.

Each step draws the next token from softmax(logits / temperature), restricted to the k most
probable tokens (top_k > 0) and to the smallest set whose probability reaches top_p (top_p < 1).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model import Transformer
from .beam import Hypothesis
from .greedy import one_path, scored
from .step import StepModel, as_step_model, ban, search_limits


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
    model: Transformer | StepModel,
    src: Tensor,
    config: DecodeConfig = DecodeConfig(),
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """One sampled translation of each sentence of src (B, S), scored by the (unfiltered) model."""
    step = as_step_model(model)

    def draw(log_probs: Tensor) -> tuple[Tensor, Tensor]:  # (B', V) -> (B', 1) each
        dist = filter_log_probs(log_probs, config.temperature, config.top_k, config.top_p).exp()
        tokens = torch.multinomial(dist, 1, generator=generator)
        return log_probs.gather(1, tokens), tokens

    return scored(one_path(step, src, search_limits(step, src, config), draw, config.forced_eos), config)


def _after(step: StepModel, src: Tensor, prefix: list[int]) -> tuple[Tensor, Any]:
    """Feed <s> and prefix to step for the one sentence src (1, S): the next token's log-probabilities (1, V), the
    banned tokens at -inf, and the cache."""
    cache = step.start(src)
    log_probs = None
    for token in [step.bos_id, *prefix]:
        log_probs, cache = step.step(torch.tensor([[token]], device=src.device), cache)
    log_probs = log_probs.clone()  # the step's buffer is overwritten by the next step
    ban(log_probs, step)
    return log_probs, cache


@torch.inference_mode()
def next_distribution(
    model: Transformer | StepModel, src: Tensor, prefix: list[int] = (), temperature: float = 1.0
) -> Tensor:
    """softmax(logits / temperature) (V,) of the token after the target prefix, for one sentence src (1, S), over
    the whole vocabulary; the tokens the model never writes (padding, the start token) get 0."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    log_probs, _ = _after(as_step_model(model), src, list(prefix))
    return (log_probs[0].float() / temperature).softmax(dim=-1)  # log_softmax(x) / T differs from x / T by a constant


@torch.inference_mode()
def sample_after(
    model: Transformer | StepModel,
    src: Tensor,
    prefix: list[int] = (),
    config: DecodeConfig = DecodeConfig(),
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[float]]:
    """A continuation of the target prefix for one sentence src (1, S), drawn token by token from
    `filter_log_probs(..., config.temperature, config.top_k, config.top_p)` until </s> or the search's length limit:
    its tokens and the probability each had under the distribution it was drawn from."""
    step = as_step_model(model)
    limit = int(search_limits(step, src, config)[0])
    log_probs, cache = _after(step, src, list(prefix))
    tokens: list[int] = []
    probs: list[float] = []
    while True:
        dist = filter_log_probs(log_probs, config.temperature, config.top_k, config.top_p).exp()  # (1, V)
        token = int(torch.multinomial(dist, 1, generator=generator))
        tokens.append(token)
        probs.append(float(dist[0, token]))
        if token == step.eos_id or len(prefix) + len(tokens) >= limit:
            return tokens, probs
        log_probs, cache = step.step(torch.tensor([[token]], device=src.device), cache)
        log_probs = log_probs.clone()
        ban(log_probs, step)
