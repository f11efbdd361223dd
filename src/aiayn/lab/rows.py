"""Three of the learner's claims measured on Table 3's trained rows (`aiayn paper table3`, lab/table3.py).

Label smoothing (§5.4) reads rows D; one head against h (§3.2.2) reads row A's h = 1 beside the base, with the
entropy of their attention; the sinusoids' extrapolation (§3.5) reads the two rows trained on short pairs, with
perplexity by length.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..model import Transformer
from .heads import attention_maps

EDGES = (12, 16, 20, 24, 28, 34)  # the length buckets' upper ends in pieces; the last bucket is open


def attention_entropy(model: Transformer, sources: list[list[int]], targets: list[list[int]]) -> dict[str, np.ndarray]:
    """Mean entropy in nats of each head's attention over its keys, per layer and head: encoder self-attention
    and the decoder's encoder-decoder attention, (L, h) each, averaged over every query of every pair."""
    totals: dict[str, np.ndarray] = {}
    queries: dict[str, int] = {}
    bos = model.config.bos_id
    for src, tgt in zip(sources, targets):
        maps = attention_maps(model, torch.tensor([src]), torch.tensor([[bos] + tgt[:-1]]))
        for name in ("encoder", "cross"):
            p = maps[name]  # (L, h, queries, keys)
            h = -(p * np.log(np.clip(p, 1e-30, None))).sum(-1)  # (L, h, queries)
            totals[name] = totals.get(name, 0) + h.sum(-1)
            queries[name] = queries.get(name, 0) + p.shape[2]
    return {name: totals[name] / queries[name] for name in totals}


@torch.no_grad()
def perplexity_by_length(
    model: Transformer, sources: list[list[int]], targets: list[list[int]], edges: tuple[int, ...] = EDGES
) -> list[dict[str, Any]]:
    """Per-piece perplexity of the targets in buckets of the pair's longer side: (.., edges[0]], .., (edges[-1], ..)."""
    model.eval()
    bos = model.config.bos_id
    buckets = [{"upto": e, "nll": 0.0, "tokens": 0, "pairs": 0} for e in (*edges, None)]
    for src, tgt in zip(sources, targets):
        n = max(len(src), len(tgt))
        bucket = next(b for b in buckets if b["upto"] is None or n <= b["upto"])
        logits = model(torch.tensor([src]), torch.tensor([[bos] + tgt[:-1]]))[0]  # (T, V)
        bucket["nll"] += F.cross_entropy(logits.float(), torch.tensor(tgt), reduction="sum").item()
        bucket["tokens"] += len(tgt)
        bucket["pairs"] += 1
    return [
        {**b, "ppl": math.exp(b["nll"] / b["tokens"]) if b["tokens"] else None, "from": lo + 1}
        for b, lo in zip(buckets, (0, *edges))
    ]


def measure(folder: Path, valid: tuple[list[str], list[str]] | None = None, pairs: int = 200) -> dict[str, Any]:
    """The three claims' numbers from a Table 3 folder (OUT/table3): its rows, and what its models say on the
    first `pairs` validation pairs (all of them for perplexity by length): the rows' own (Multi30k En-De) unless
    given."""
    from ..data.sources import Source
    from ..translator import Translator
    from .trained import multi30k_recipe

    if valid is None:
        d = multi30k_recipe([]).data
        valid = Source(d.valid, d.src_lang, d.tgt_lang).read()

    path = folder / "table3.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no Table 3 run here (aiayn paper table3 --out DIR writes DIR/table3)")
    rows = {r["label"]: r for r in json.loads(path.read_text())}
    out: dict[str, Any] = {"folder": str(folder), "rows": rows, "tolerance": rows["base"]["tolerance"]}

    def encoded(run: str, n: int | None) -> tuple[Translator, list[list[int]], list[list[int]]]:
        t = Translator.load(folder / run / "model")
        t.model.eval()
        return t, t.tokenizer.encode_source(valid[0][:n]), t.tokenizer.encode_target(valid[1][:n])

    if "h=1" in rows:
        out["entropy"] = {}
        for label, run in (("h=1", "h-1"), ("base", "base")):
            t, src, tgt = encoded(run, pairs)
            out["entropy"][label] = attention_entropy(t.model, src, tgt)
    if "short, sinusoids" in rows and "short, learned" in rows:
        out["by_length"] = {}
        for label, run in (("sinusoids", "short-sinusoids"), ("learned", "short-learned")):
            t, src, tgt = encoded(run, None)
            out["by_length"][label] = perplexity_by_length(t.model, src, tgt)
        out["cut"] = json.loads((folder / "short-sinusoids" / "row.json").read_text())["key"]["short"]
    return out
