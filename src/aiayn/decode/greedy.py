"""Greedy decoding with the incremental decoder: the most probable token at each step, cached keys/values."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model import Transformer
from .beam import Hypothesis, length_penalty, top_k
from .step import StepModel, as_step_model, ban, drop_ended, force_eos, output_limits, search_limits


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len: int | Tensor | None = None, extra: int = 50) -> Tensor:
    """src (B, S) -> hypotheses (B, L), pad after </s>; L is the longest limit.

    Each output stops at </s> or after max_len tokens (default: that sentence's length + `extra`, §6.1).
    """
    step = as_step_model(model)
    if max_len is None:
        limits = output_limits(src, step.pad_id, extra, step.max_len)
    else:
        limits = torch.full((src.size(0),), int(max_len), device=src.device)
    hyps = one_path(step, src, limits, argmax)
    out = torch.full((src.size(0), int(limits.max())), step.pad_id, dtype=torch.long)
    for i, h in enumerate(hyps):
        out[i, : len(h.tokens)] = torch.tensor(h.tokens, dtype=torch.long)
    return out.to(src.device)


@torch.inference_mode()
def greedy_hypotheses(
    model: Transformer | StepModel, src: Tensor, config: DecodeConfig = DecodeConfig()
) -> list[list[Hypothesis]]:
    """Greedy search with beam_search's limits and result type: one hypothesis per sentence."""
    step = as_step_model(model)
    pick = getattr(step, "argmax", argmax)  # a step model may bring a faster pick of the same token (aiayn.cpu)
    hyps = one_path(step, src, search_limits(step, src, config), pick, config.forced_eos)
    return scored(hyps, config)


def argmax(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """(B', V) -> the best token's log-probability and the token, (B', 1) each: the first among equals."""
    return top_k(log_probs, 1)  # faster than max() over a long vocabulary


def scored(hyps: list[Hypothesis], config: DecodeConfig) -> list[list[Hypothesis]]:
    """Each sentence's one hypothesis, its score the log-probability over the length penalty (as beam search ranks)."""
    lp = lambda n: length_penalty(config.alpha, float(n), config.length_penalty)  # noqa: E731
    return [[Hypothesis(h.tokens, h.log_prob / lp(len(h.tokens)), h.log_prob)] for h in hyps]


def one_path(
    step: StepModel,
    src: Tensor,
    limits: Tensor,
    choose: Callable[[Tensor], tuple[Tensor, Tensor]],
    forced_eos: bool = False,
) -> list[Hypothesis]:
    """One output per sentence of src (B, S), each token picked by choose(log_probs) until </s> or its limit.

    choose maps the step's (B', V) log-probabilities to the picked tokens' log-probabilities and the
    tokens, (B', 1) each: `argmax` for greedy search, a draw for sampling. Finished sentences leave
    the batch; a hypothesis's log_prob sums the model's log-probabilities of its tokens.
    """
    B = src.size(0)
    cache = step.start(src)
    tokens = torch.full((B, 1), step.bos_id, dtype=torch.long, device=src.device)  # (B', 1)
    alive = torch.arange(B, device=src.device)  # (B',) sentence of each row
    history = torch.full((B, int(limits.max())), step.pad_id, dtype=torch.long, device=src.device)
    log_prob = torch.zeros(B, device=src.device)
    length = torch.zeros(B, dtype=torch.long, device=src.device)
    for t in range(int(limits.max())):
        log_probs, cache = step.step(tokens, cache)  # (B', V)
        ban(log_probs, step)
        if forced_eos:
            force_eos(log_probs, t + 1 >= limits[alive], step.eos_id)
        picked, tokens = choose(log_probs)  # (B', 1) each
        del log_probs  # before the next step's are made: one (B', V) tensor alive at a time, not two
        history[alive, t] = tokens[:, 0]
        log_prob[alive] += picked[:, 0]
        length[alive] = t + 1
        ended = (tokens[:, 0] == step.eos_id) | (t + 1 >= limits[alive])
        if ended.any():
            rest = drop_ended(ended, alive, tokens, cache)
            if rest is None:
                break
            alive, tokens, cache = rest
    return [Hypothesis(history[i, : int(length[i])].tolist(), float(log_prob[i]), float(log_prob[i])) for i in range(B)]
