"""Looking inside a search: the beam-search tree, and "what if" a target prefix is forced (§6.1).

`beam_tree` runs the beam search of `beam.py` for one sentence, written out step by step so that
every hypothesis it keeps can be recorded: at each step the K live hypotheses and those that finish
there, each with its parent, token and log-probability. The rules are beam_search's: the best 2K
continuations, the best-ranked K of them that end in </s> finish (scored with the length penalty),
the best K others live on, and the search stops when no live hypothesis can beat the K-th finished
one. Its best finished path is beam_search's best hypothesis.

With a forced prefix, the prefix's tokens are fed one at a time first (each one's probability and
the top alternatives recorded), and the search continues from there. Only the StepModel interface
of `step.py` is used: start, step (whose log-probs are cloned before the next step) and
index_select.

Dimension legend: k live hypotheses (1, then K), V target vocabulary, C = 2K candidates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model import Transformer
from .step import StepModel, as_step_model


@dataclass
class Node:
    """One hypothesis of the tree: the root (the start token), a forced token or a searched one."""

    id: int
    parent: int | None  # the hypothesis this one extends; None for the root
    token: int  # the token it adds (the start token for the root)
    step: int  # its length: 0 for the root
    log_prob: float  # log P of the whole hypothesis
    finished: bool = False  # ended in </s> (or at the length limit) and joined the finished set
    score: float | None = None  # log_prob / length penalty, for finished hypotheses
    forced: bool = False
    token_prob: float | None = None  # P(token | parent), for forced tokens
    alternatives: list[tuple[int, float]] = field(default_factory=list)  # forced: the top (token, P) instead


@dataclass
class Tree:
    nodes: list[Node]  # nodes[i].id == i; nodes[0] is the root
    steps: list[list[int]]  # per step, the ids of the hypotheses kept alive and those finished there
    best: list[int]  # the best finished hypothesis's tokens (ending in </s> unless cut at the limit)
    best_score: float

    def path(self, node_id: int) -> list[int]:
        """The tokens from the root (excluded) to node_id."""
        tokens = []
        while self.nodes[node_id].parent is not None:
            tokens.append(self.nodes[node_id].token)
            node_id = self.nodes[node_id].parent
        return tokens[::-1]

    def to_dict(self) -> dict:
        return {
            "nodes": [asdict(n) for n in self.nodes],
            "steps": self.steps,
            "best": self.best,
            "best_score": self.best_score,
        }


@torch.inference_mode()
def beam_tree(
    model: Transformer | StepModel,
    src: Tensor,
    config: DecodeConfig = DecodeConfig(),
    prefix: list[int] = (),
    alternatives: int = 5,
) -> Tree:
    """The beam-search tree of one sentence src (1, S), after forcing the target tokens `prefix`."""
    model = as_step_model(model)
    K = config.beam_size
    limit = _limit(model, src, config)
    check_prefix(model, list(prefix), limit)
    nodes = [Node(0, None, model.bos_id, 0, 0.0)]
    cache = model.start(src)
    last = torch.tensor([[model.bos_id]], device=src.device)  # (1, 1)
    for t, token in enumerate(prefix):  # one hypothesis: no reordering needed
        log_probs, cache = model.step(last, cache)  # (1, V)
        log_probs = log_probs.clone()
        _ban(log_probs, model)  # as the search sees them: the alternatives are tokens it could write
        probs = log_probs[0].float().exp()
        top = probs.topk(min(alternatives, probs.numel()))
        parent = nodes[-1]
        nodes.append(
            Node(
                len(nodes),
                parent.id,
                token,
                t + 1,
                parent.log_prob + float(log_probs[0, token]),
                forced=True,
                token_prob=float(probs[token]),
                alternatives=[(int(i), float(p)) for p, i in zip(top.values, top.indices)],
            )
        )
        last = torch.tensor([[token]], device=src.device)
    if prefix and prefix[-1] == model.eos_id:  # a forced end: the prefix is the whole translation
        nodes[-1].finished, nodes[-1].score = True, nodes[-1].log_prob / _penalty(config, len(prefix))
        return Tree(nodes, [[n.id] for n in nodes[1:]], list(prefix), nodes[-1].score)
    steps, finished = _search(model, cache, last, nodes, K, len(prefix), limit, config)
    best = max(finished, key=lambda i: nodes[i].score)  # the first of equal scores, as topk keeps it
    tree = Tree(nodes, [[n.id] for n in nodes[1 : len(prefix) + 1]] + steps, [], nodes[best].score)
    tree.best = tree.path(best)
    return tree


def check_prefix(model: StepModel, prefix: list[int], limit: int) -> None:
    """A prefix the search could have written: shorter than the limit, no banned token, </s> only last."""
    if len(prefix) >= limit:
        raise ValueError(f"the forced prefix has {len(prefix)} tokens; this source allows at most {limit - 1}")
    for i, token in enumerate(prefix):
        if token in model.banned:
            raise ValueError(f"token {i + 1} of the forced prefix ({token}) is one the model never writes")
        if token == model.eos_id and i < len(prefix) - 1:
            raise ValueError(f"token {i + 1} of the forced prefix is </s>, which may only come last")


def _search(
    model: StepModel, cache, last: Tensor, nodes: list[Node], K: int, start: int, limit: int, config: DecodeConfig
) -> tuple[list[list[int]], list[int]]:
    """Beam search from the single hypothesis nodes[-1] at length start; nodes grow in place.

    Returns the node ids of each step and the ids of the finished set (best first).
    """
    live = [nodes[-1].id]
    finished: list[int] = []  # at most K, best first
    steps: list[list[int]] = []
    for t in range(start, limit):
        log_probs, cache = model.step(last, cache)  # (k, V), overwritten by the next step
        log_probs = log_probs.clone()
        _ban(log_probs, model)
        if config.forced_eos and t + 1 >= limit:  # at the limit only </s>, at log-probability 0 (HF's forced_eos)
            log_probs.fill_(-math.inf)
            log_probs[:, model.eos_id] = 0.0
        live_lp = torch.tensor([nodes[i].log_prob for i in live], device=log_probs.device)
        total = (live_lp[:, None] + log_probs).view(-1)  # (k * V,)
        cand_lp, flat = total.topk(min(2 * K, total.numel()))  # (C,), best first
        V = log_probs.size(1)
        kept, new_live, penalty = [], [], _penalty(config, t + 1)
        for rank, (lp, index) in enumerate(zip(cand_lp.tolist(), flat.tolist())):
            parent, token = live[index // V], index % V
            ends = token == model.eos_id or t + 1 >= limit
            if lp == -math.inf:  # impossible (banned, or not </s> at the limit): never kept nor ranked
                continue
            if ends and rank < K:
                node = Node(len(nodes), parent, token, t + 1, lp, finished=True, score=lp / penalty)
            elif not ends and len(new_live) < K:
                node = Node(len(nodes), parent, token, t + 1, lp)
                new_live.append((index // V, node.id))
            else:
                continue
            nodes.append(node)
            kept.append(node.id)
            if node.finished:
                finished.append(node.id)
        finished = sorted(finished, key=lambda i: -nodes[i].score)[:K]  # stable: earlier ones first on ties
        steps.append(kept)
        if _done(nodes, new_live, finished, K, limit, t, config):
            break
        rows = torch.tensor([row for row, _ in new_live], device=last.device)
        first = len(live) == 1 and t == start  # one row per sentence so far: say that the sentence stays
        cache = cache.index_select(rows, torch.zeros(1, dtype=torch.long, device=last.device) if first else None)
        live = [node_id for _, node_id in new_live]
        last = torch.tensor([[nodes[i].token] for i in live], device=last.device)  # (K, 1)
    return steps, finished


# beam_search's rules, restated here (decode/ reaches models only through StepModel; the tests hold
# the tree's result to beam_search's).
def _limit(model: StepModel, src: Tensor, config: DecodeConfig) -> int:
    """Longest output, </s> included: source length + extra_len (§6.1), capped by config.max_len and
    by the model's position table."""
    caps = [c for c in (config.max_len, model.max_len) if c is not None]
    return min([int((src != model.pad_id).sum()) + config.extra_len, *caps])


def _ban(log_probs: Tensor, model: StepModel) -> None:
    """The tokens the model never writes (padding, the start token) get log-probability -inf."""
    log_probs[:, list(model.banned)] = -math.inf


def _penalty(config: DecodeConfig, length: int) -> float:
    """GNMT's ((5 + |Y|) / 6)^alpha (§6.1), or Hugging Face's |Y|^alpha ("power")."""
    if config.length_penalty == "gnmt":
        return ((5.0 + length) / 6.0) ** config.alpha
    return float(length) ** config.alpha


def _done(
    nodes: list[Node],
    live: list[tuple[int, int]],
    finished: list[int],
    K: int,
    limit: int,
    t: int,
    config: DecodeConfig,
) -> bool:
    """No live hypothesis can beat the K-th finished one (beam.py's bound), or the length limit."""
    if t + 1 >= limit or not live:
        return True
    if len(finished) < K:
        return False
    best_alive = nodes[live[0][1]].log_prob
    length = limit if config.length_penalty == "gnmt" else t + 1
    return best_alive / _penalty(config, length) <= nodes[finished[-1]].score


@torch.inference_mode()
def teacher_forced_attention(model: Transformer, src: Tensor, target: list[int]):
    """The attention weights of one teacher-forced pass over target (ending in </s>): src (1, S).

    The decoder reads <s> y_1 .. y_{T-1} and its position i predicts y_{i+1}: returns the model's
    Attention, each layer (1, h, T_q, T_k).
    """
    tgt_in = torch.tensor([[model.config.bos_id] + list(target[:-1])], device=src.device)  # (1, T)
    return model(src, tgt_in, return_attention=True).attention
