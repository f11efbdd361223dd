"""The paper's smaller claims, one function each: tied embeddings (§3.4), masked weights (§3.2.3), the FFN
as two kernel-1 convolutions (§3.3), permutation equivariance without positions (§3.5), eq. 3's curve
(§5.3), additive against dot-product attention (§3.2.1), and checkpoint averaging (§6.1)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..model import Transformer
from ..train.schedule import rate


@torch.no_grad()
def shared_matrix(model: Transformer) -> dict[str, Any]:
    """Whether one matrix is the source embedding, the target embedding and the pre-softmax projection."""
    model.eval()
    weight = model.decoder.embed.weight  # (V, D)
    hidden = torch.randn(3, model.config.d_model)
    ids = torch.arange(min(8, weight.shape[0]))[None]  # (1, 8)
    scaled = weight[ids] * math.sqrt(model.config.d_model)  # §3.4: "we multiply those weights by sqrt(d_model)"
    return {
        "embeddings_shared": model.encoder.embed.weight.data_ptr() == weight.data_ptr(),
        "projection_error": float((model.project(hidden) - F.linear(hidden, weight, model.logits_bias)).abs().max()),
        "scale_error": max(float((e(ids) - scaled).abs().max()) for e in (model.encoder.embed, model.decoder.embed)),
    }


@torch.no_grad()
def masked_weights(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> float:
    """The largest decoder self-attention weight on a later position (exactly 0 when masked)."""
    model.eval()
    weights = model(src, tgt_in, return_attention=True).attention.decoder  # per layer (B, h, T, T)
    T = tgt_in.size(1)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T): key after query
    return max(float(w[..., future].abs().max()) if T > 1 else 0.0 for w in weights)


@torch.no_grad()
def ffn_as_convolutions(model: Transformer, length: int = 7, seed: int = 0) -> float:
    """max |FFN(x) - conv1d(relu(conv1d(x, W_1)), W_2)| over max |FFN(x)|, for the first encoder layer's FFN,
    kernel size 1: relative, since a trained FFN's outputs run into the hundreds and float32 rounds each
    product to about 1e-7 of its size."""
    ffn = model.encoder.layers[0].ffn
    x = torch.randn(2, length, model.config.d_model, generator=torch.Generator().manual_seed(seed))  # (B, n, D)
    h = ffn.activation(F.conv1d(x.transpose(1, 2), ffn.fc1.weight[:, :, None], ffn.fc1.bias))  # (B, d_ff, n)
    y = F.conv1d(h, ffn.fc2.weight[:, :, None], ffn.fc2.bias).transpose(1, 2)  # (B, n, D)
    out = ffn(x)
    return float((out - y).abs().max() / out.abs().max().clamp(min=1e-30))


@torch.no_grad()
def permutation_equivariance(model: Transformer, src: torch.Tensor, seed: int = 0) -> dict[str, float]:
    """max |enc(P x) - P enc(x)| for a random permutation P, without positions and with them."""
    model.eval()
    perm = torch.randperm(src.size(1), generator=torch.Generator().manual_seed(seed))
    table = model.encoder.positions.table
    errors = {}
    for name in ("with_positions", "without_positions"):
        saved = table.detach().clone()
        if name == "without_positions":
            table.data.zero_()
        try:
            z, _ = model.encode(src)  # (1, S, D)
            z_perm, _ = model.encode(src[:, perm])
            errors[name] = float((z_perm - z[:, perm]).abs().max())
        finally:
            table.data.copy_(saved)
    return errors


def learning_rate_curve(d_model: int = 512, warmup: int = 4000, steps: int = 100_000) -> dict[str, Any]:
    """Eq. 3 over training: steps (n,), rates (n,), and where it peaks."""
    s = np.unique(np.geomspace(1, steps, 400).astype(int))
    s = np.union1d(s, [warmup])
    r = np.array([rate(int(i), d_model, warmup) for i in s])
    return {"steps": s, "rates": r, "peak_step": int(s[r.argmax()]), "peak_rate": float(r.max())}


def additive_scores(
    q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Additive attention's compatibility v^T tanh(W_q q_i + W_k k_j) (Bahdanau et al.): (B, n, n)."""
    return torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ v  # (B, n, n, d) @ (d,)


@torch.no_grad()
def additive_vs_dot(d_k: int = 64, n: int = 64, batch: int = 16, repeats: int = 5) -> dict[str, float]:
    """Fastest time in ms of the scores and weights of both attentions at the same d_k."""
    from .recurrence import fastest_ms

    q, k = torch.randn(batch, n, d_k), torch.randn(batch, n, d_k)
    w_q, w_k, v = torch.randn(d_k, d_k), torch.randn(d_k, d_k), torch.randn(d_k)
    dot = fastest_ms(lambda: torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_k), -1), repeats)
    additive = fastest_ms(lambda: torch.softmax(additive_scores(q, k, w_q, w_k, v), -1), repeats)
    return {"dot_ms": dot, "additive_ms": additive, "ratio": additive / dot}


def averaged_checkpoints(run: Path) -> list[str] | None:
    """The checkpoints run/model is the mean of, as training recorded them in results.json; None where it did not."""
    try:
        names = json.loads((run / "results.json").read_text(encoding="utf-8"))["averaged"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None


def averaged_vs_last(run: Path, sources: list[str], references: list[str], beam_size: int = 1) -> dict[str, Any]:
    """BLEU on the given sentences of run/model (the averaged checkpoints) and of the last checkpoint."""
    from ..evaluate import sacre_bleu
    from ..train.checkpoint import checkpoint_steps
    from ..translator import Translator

    steps = checkpoint_steps(run / "checkpoints")
    if not steps or not (run / "model").is_dir():
        raise FileNotFoundError(f"{run}: no checkpoints/ and model/ to compare")
    scores: dict[str, Any] = {"checkpoints": averaged_checkpoints(run) or [p.name for _, p in steps]}
    outputs = {}
    for name, path in (("averaged", run / "model"), ("last", steps[-1][1])):
        began = time.perf_counter()
        outputs[name] = Translator.load(path, beam_size=beam_size).translate(sources)
        scores[name] = sacre_bleu(outputs[name], references).score
        scores[f"{name}_s"] = time.perf_counter() - began
    scores.update(paired_bootstrap(outputs["last"], outputs["averaged"], references))
    return scores


def paired_bootstrap(baseline: list[str], system: list[str], references: list[str], samples: int = 1000) -> dict:
    """sacreBLEU's paired bootstrap resampling (Koehn 2004) of system against baseline: the 95% confidence
    half-width of the system's BLEU and the p-value of its difference from the baseline's."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": BLEU()}, [references], "bs", samples)
    _, results = test()
    result = results["BLEU"][1]
    return {"ci95": float(result.ci), "p_value": float(result.p_value)}
