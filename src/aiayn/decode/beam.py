"""Batched beam search (§6.1): beam 4, length penalty alpha 0.6, output length up to input + 50.

The model is reached only through the step interface of `step.py`. Each step keeps the 2K best
continuations of the K live hypotheses of every sentence (so that K of them ending in </s> cannot
starve the beam): the best K that end in </s> (among the first K ranks) join the finished set,
scored with the length penalty, and the best K that do not stay alive. The decoder cache follows
the live hypotheses by one index select. A sentence is done when its K finished hypotheses cannot
be beaten by any live one, or at its length limit; done sentences leave the batch.

Dimension legend: B sentences still searched, K beams, C = 2K candidates, L longest output, V vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model import Transformer
from .step import StepModel, as_step_model, ban, force_eos, search_limits


class Hypothesis(NamedTuple):
    tokens: list[int]  # generated ids, ending in </s> unless the length limit cut the search
    score: float  # log P(tokens) / length_penalty, what the search ranks by
    log_prob: float  # log P(tokens) under the model


def length_penalty(alpha: float, length: Tensor | float, kind: str = "gnmt") -> Tensor | float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, used in §6.1), or "power": |Y|^alpha (HF)."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "power":
        return length**alpha
    raise ValueError(f"unknown length penalty {kind!r}; choose gnmt or power")


@dataclass
class BeamState:
    """The search after t steps, for the B sentences not yet done."""

    alive_tokens: Tensor  # (B, K, L) live hypotheses, pad after position t
    alive_log_probs: Tensor  # (B, K) their log-probabilities, best first
    finished_tokens: Tensor  # (B, K, L) finished hypotheses, pad-filled
    finished_scores: Tensor  # (B, K) their length-penalised scores, -inf for an empty slot
    finished_log_probs: Tensor  # (B, K)
    finished_lengths: Tensor  # (B, K) tokens in each finished hypothesis
    limits: Tensor  # (B,) longest output allowed for each sentence
    sentence: Tensor  # (B,) position of each sentence in the caller's batch

    def select(self, keep: Tensor) -> BeamState:
        """Only the sentences at positions keep (B',)."""
        return BeamState(*(getattr(self, f).index_select(0, keep) for f in self.__dataclass_fields__))


@torch.inference_mode()
def beam_search(
    model: Transformer | StepModel, src: Tensor, config: DecodeConfig = DecodeConfig()
) -> list[list[Hypothesis]]:
    """The config.n_best best hypotheses of each sentence of src (B, S), best first."""
    model = as_step_model(model)
    K = config.beam_size
    limits = search_limits(model, src, config)
    B, L = src.size(0), int(limits.max())
    results: list[list[Hypothesis]] = [[] for _ in range(B)]
    cache = model.start(src)
    tokens = torch.full((B, K, L), model.pad_id, dtype=torch.long, device=src.device)
    state = BeamState(
        alive_tokens=tokens,
        alive_log_probs=torch.zeros(B, 1, device=src.device),  # one live hypothesis: the empty one
        finished_tokens=tokens.clone(),
        finished_scores=torch.full((B, K), -math.inf, device=src.device),
        finished_log_probs=torch.full((B, K), -math.inf, device=src.device),
        finished_lengths=torch.zeros(B, K, dtype=torch.long, device=src.device),
        limits=limits,
        sentence=torch.arange(B, device=src.device),
    )
    last = torch.full((B, 1), model.bos_id, dtype=torch.long, device=src.device)  # (B*1, 1)
    for t in range(L):
        log_probs, cache = model.step(last, cache)  # (B*k, V), k = 1 at t = 0, else K
        ban(log_probs, model)
        if config.forced_eos:  # (B*k,): each row's sentence at its limit
            k = log_probs.size(0) // state.limits.size(0)
            force_eos(log_probs, (t + 1 >= state.limits).repeat_interleave(k), model.eos_id)
        state, rows = _advance(state, log_probs, t, K, model.eos_id, config)
        del log_probs  # before the next step's are made: one (B*k, V) tensor alive at a time, not two
        done = _is_done(state, t, config)
        sentences = None  # every sentence stays, unless some are done
        if done.any():
            _collect(state, done, results, config.n_best)
            sentences = (~done).nonzero()[:, 0]
            if sentences.numel() == 0:
                break
            state = state.select(sentences)
            rows = rows.view(-1, K).index_select(0, sentences).view(-1)
        cache = cache.index_select(rows, sentences)  # one index select: reorder beams, drop done sentences
        last = state.alive_tokens[:, :, t].reshape(-1, 1)  # (B*K, 1)
    return results


def _advance(
    state: BeamState, log_probs: Tensor, t: int, K: int, eos: int, config: DecodeConfig
) -> tuple[BeamState, Tensor]:
    """One step: the 2K best continuations; the top-ranked that end in </s> finish, K others live on.

    log_probs (B*k, V) are the next-token log-probabilities of the k live hypotheses of each sentence.
    Returns the new state and, for each new live hypothesis, its parent's row in log_probs (B*K,).
    """
    B, k = state.alive_log_probs.shape
    V = log_probs.size(1)
    C = max(min(2 * K, k * V), K)  # at least K: a first step (k = 1) may have fewer continuations than beams
    # The best C of all k x V continuations are among the best C of each hypothesis's own V.
    row_lp, row_tok = top_k(log_probs, min(C, V))  # (B*k, c)
    total = (state.alive_log_probs.view(B * k, 1) + row_lp).view(B, -1)  # (B, k*c)
    n = total.size(1)
    if n < C:  # k x V < K: the missing candidates are impossible ones (-inf), copies of the last real one
        cand_lp, flat = torch.cat([total, total.new_full((B, C - n), -math.inf)], dim=1).topk(C, dim=1)
        flat = flat.clamp(max=n - 1)
    else:
        cand_lp, flat = total.topk(C, dim=1)  # (B, C), best first
    beam = flat // row_lp.size(1)  # (B, C) parent hypothesis in 0..k-1
    token = row_tok.view(B, -1).gather(1, flat)  # (B, C)
    parent_seq = state.alive_tokens.gather(1, beam[:, :, None].expand(-1, -1, state.alive_tokens.size(2)))
    cand_seq = parent_seq.clone()  # (B, C, L)
    cand_seq[:, :, t] = token
    # A candidate ends at </s> or at its sentence's length limit; only the first K ranks may finish.
    ends = (token == eos) | (t + 1 >= state.limits)[:, None]  # (B, C)
    finishing = ends & (torch.arange(C, device=ends.device) < K)
    lp = length_penalty(config.alpha, float(t + 1), config.length_penalty)
    cand_score = (cand_lp / lp).masked_fill(~finishing, -math.inf)
    scores = torch.cat([state.finished_scores, cand_score], dim=1)  # (B, K + C)
    best = scores.topk(K, dim=1).indices  # (B, K)
    finished_tokens = torch.cat([state.finished_tokens, cand_seq], dim=1)
    finished_log_probs = torch.cat([state.finished_log_probs, cand_lp.masked_fill(~finishing, -math.inf)], dim=1)
    finished_lengths = torch.cat([state.finished_lengths, torch.full_like(token, t + 1)], dim=1)
    # The best K candidates that do not end stay alive. Where fewer than K do (a small or masked vocabulary),
    # the rest are impossible (-inf), ended ones included: a hypothesis never goes on past its </s>.
    alive_lp = cand_lp.masked_fill(ends, -math.inf)
    alive = alive_lp.topk(K, dim=1).indices  # (B, K)
    new = BeamState(
        alive_tokens=cand_seq.gather(1, alive[:, :, None].expand(-1, -1, cand_seq.size(2))),
        alive_log_probs=alive_lp.gather(1, alive),
        finished_tokens=finished_tokens.gather(1, best[:, :, None].expand(-1, -1, cand_seq.size(2))),
        finished_scores=scores.gather(1, best),
        finished_log_probs=finished_log_probs.gather(1, best),
        finished_lengths=finished_lengths.gather(1, best),
        limits=state.limits,
        sentence=state.sentence,
    )
    rows = (beam.gather(1, alive) + torch.arange(B, device=beam.device)[:, None] * k).view(-1)  # (B*K,)
    return new, rows


def top_k(x: Tensor, k: int, block: int = 128) -> tuple[Tensor, Tensor]:
    """x.topk(k, dim=1) for long rows (N, V), in one pass over x instead of a selection per row.

    The k largest values of a row lie in the k blocks (of `block` columns) with the largest maxima,
    so only those k x block candidates (and the last, partial block) are searched.
    """
    N, V = x.shape
    n_blocks = V // block
    if n_blocks <= 2 * k:
        return x.topk(k, dim=1)
    full = x[:, : n_blocks * block].view(N, n_blocks, block)  # (N, n_blocks, block), no copy
    best_blocks = full.amax(dim=2).topk(k, dim=1).indices  # (N, k)
    candidates = torch.cat(
        [
            full.gather(1, best_blocks[:, :, None].expand(N, k, block)).view(N, k * block),
            x[:, n_blocks * block :],  # the partial block at the end
        ],
        dim=1,
    )  # (N, k * block + V % block)
    values, position = candidates.topk(k, dim=1)
    column = best_blocks.gather(1, (position // block).clamp(max=k - 1)) * block + position % block
    column = torch.where(position < k * block, column, position - k * block + n_blocks * block)
    return values, column


def _is_done(state: BeamState, t: int, config: DecodeConfig) -> Tensor:
    """(B,) True where no live hypothesis can beat the worst of K finished ones, or at the length limit.

    Scores only fall as a hypothesis grows, so with the GNMT penalty the best a live one can still
    reach is its log-probability over lp(limit): the exact bound (as in tensor2tensor). With "power"
    this is Hugging Face's default heuristic (early_stopping=False): over lp of its current length.
    """
    best_alive = state.alive_log_probs[:, 0]  # (B,)
    if config.length_penalty == "gnmt":
        bound = best_alive / length_penalty(config.alpha, state.limits.float(), "gnmt")
    else:
        bound = best_alive / length_penalty(config.alpha, float(t + 1), config.length_penalty)
    worst_finished = state.finished_scores[:, -1]  # -inf until K hypotheses have finished
    return (bound <= worst_finished) | (t + 1 >= state.limits)


def _collect(state: BeamState, done: Tensor, results: list[list[Hypothesis]], n_best: int) -> None:
    """Move the n_best finished hypotheses of the done sentences into results."""
    for b in done.nonzero()[:, 0].tolist():
        hyps = []
        for j in range(n_best):
            score = float(state.finished_scores[b, j])
            if score == -math.inf:
                break
            seq = state.finished_tokens[b, j, : int(state.finished_lengths[b, j])].tolist()
            hyps.append(Hypothesis(seq, score, float(state.finished_log_probs[b, j])))
        results[int(state.sentence[b])] = hyps
