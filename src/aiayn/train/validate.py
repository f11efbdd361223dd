"""Validation during and after training: loss, per-word-piece perplexity, and sacreBLEU (§6.1)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..config import DecodeConfig
from ..data.batching import Batch
from ..model import Transformer
from ..translator import Translator
from .loss import label_smoothed_nll


class Validation(NamedTuple):
    loss: float  # label-smoothed loss per target token
    nll: float  # negative log-likelihood per target word piece
    perplexity: float  # exp(nll): per-word-piece perplexity


@torch.no_grad()
def validation_loss(model: Transformer, batches: list[Batch], epsilon: float, device: torch.device) -> Validation:
    """Teacher-forced loss and perplexity over all validation batches, in fp32 whatever the training's precision."""
    was_training = model.training
    model.eval()
    loss_sum = nll_sum = n = 0.0
    for b in batches:
        logits = model(b.src.to(device), b.tgt_in.to(device))
        loss, nll, count = label_smoothed_nll(logits, b.tgt_out.to(device), epsilon, model.config.pad_id)
        loss_sum, nll_sum, n = loss_sum + loss.item(), nll_sum + nll.item(), n + count
    model.train(was_training)
    return Validation(loss_sum / n, nll_sum / n, math.exp(min(nll_sum / n, 50.0)))


@torch.no_grad()
def translate_texts(
    model: Transformer,
    tokenizer,
    texts: list[str],
    beam_size: int = 4,
    alpha: float = 0.6,
    device: torch.device | str = "cpu",
) -> list[str]:
    """Translations of texts by beam search (§6.1), the model put back in its mode afterwards."""
    was_training = model.training
    config = DecodeConfig(beam_size=beam_size, alpha=alpha)
    out = Translator(model, tokenizer, config, device=str(device)).translate(texts)
    model.train(was_training)
    return out


def sacrebleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """Cased, detokenised sacreBLEU (13a) and its signature."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    return bleu.corpus_score(hypotheses, [references]).score, str(bleu.get_signature())
