"""Validation during and after training: loss, per-word-piece perplexity, and sacreBLEU (§6.1)."""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import torch

from ..config import DecodeConfig
from ..data.batching import Batch
from ..model import Transformer
from .loss import label_smoothed_nll


class Validation(NamedTuple):
    loss: float  # label-smoothed loss per target token
    nll: float  # negative log-likelihood per target word piece
    perplexity: float  # exp(nll): per-word-piece perplexity


def autocast(device: torch.device, bf16: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on CPU or CUDA when asked for, else nothing."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


@torch.no_grad()
def validation_loss(model: Transformer, batches: list[Batch], epsilon: float, device: torch.device, bf16: bool = False) -> Validation:
    """Teacher-forced loss and perplexity over all validation batches."""
    was_training = model.training
    model.eval()
    loss_sum = nll_sum = n = 0.0
    for b in batches:
        with autocast(device, bf16):
            logits = model(b.src.to(device), b.tgt_in.to(device))
        loss, nll, count = label_smoothed_nll(logits, b.tgt_out.to(device), epsilon, model.config.pad_id)
        loss_sum, nll_sum, n = loss_sum + loss.item(), nll_sum + nll.item(), n + count
    model.train(was_training)
    return Validation(loss_sum / n, nll_sum / n, math.exp(min(nll_sum / n, 50.0)))


@torch.no_grad()
def translate_texts(
    model: Transformer, tokenizer, texts: list[str], beam_size: int = 4, alpha: float = 0.6,
    device: torch.device | str = "cpu", batch_size: int = 64,
) -> list[str]:
    """Translations of texts: aiayn's Translator (beam search) when present, else greedy search."""
    was_training = model.training
    model.eval()
    try:
        from ..decode.translate import Translator  # issue 4; greedy search until it lands
    except ImportError:
        Translator = None
    if Translator is not None:
        config = DecodeConfig(beam_size=beam_size, alpha=alpha)
        out = Translator(model, tokenizer, config, device=str(device)).translate(texts, beam_size=beam_size, alpha=alpha)
    else:
        out = _greedy(model, tokenizer, texts, torch.device(device), batch_size)
    model.train(was_training)
    return out


def _greedy(model: Transformer, tokenizer, texts: list[str], device: torch.device, batch_size: int) -> list[str]:
    from ..decode.greedy import greedy_search

    ids = tokenizer.encode_source(texts)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [""] * len(ids)
    pad = model.config.pad_id
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        S = max(len(ids[i]) for i in chunk)
        src = torch.tensor([ids[i] + [pad] * (S - len(ids[i])) for i in chunk], device=device)
        hyp = greedy_search(model, src)
        for i, row in zip(chunk, hyp.tolist()):
            out[i] = tokenizer.decode(row)
    return out


def sacrebleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """Cased, detokenised sacreBLEU (13a) and its signature."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    return bleu.corpus_score(hypotheses, [references]).score, str(bleu.get_signature())
