"""Scores of translations (SPEC M5): sacreBLEU, the paper's tokenised BLEU, chrF, perplexity.

- sacreBLEU: cased, detokenised, its own 13a tokenisation, reported with its signature; the
  number to compare across papers (Post 2018).
- Tokenised BLEU, as the paper's En-De numbers were computed (tensor2tensor's get_ende_bleu.sh):
  the hypothesis's Unicode punctuation replaced (Moses' replace-unicode-punctuation.perl; the
  script applies it to the decodes only), both sides Moses-tokenised, for German hyphenated
  compounds split as "a ##AT##-##AT## b", then BLEU over the tokens (multi-bleu.perl). It runs
  higher than sacreBLEU on the same output.
- chrF (Popović 2015) through sacreBLEU.
- Perplexity of the references under a model, per word piece: exp(mean negative log-likelihood).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU, CHRF

from .model import Transformer

COMPOUND = re.compile(r"(\S)-(\S)")


class Score(NamedTuple):
    name: str
    score: float
    signature: str  # how it was computed, for the report

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}  ({self.signature})"


def _check(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def sacre_bleu(hypotheses: list[str], references: list[str]) -> Score:
    """sacreBLEU: cased, detokenised input, 13a tokenisation, exponential smoothing (its defaults)."""
    _check(hypotheses, references)
    metric = BLEU()
    result = metric.corpus_score(hypotheses, [references])
    return Score("sacreBLEU", result.score, str(metric.get_signature()))


def chrf(hypotheses: list[str], references: list[str]) -> Score:
    """chrF2 (character 6-grams, beta 2) through sacreBLEU."""
    _check(hypotheses, references)
    metric = CHRF()
    return Score("chrF", metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature()))


def split_compounds(text: str) -> str:
    """ "rot-weiß" -> "rot ##AT##-##AT## weiß": tensor2tensor's get_ende_bleu.sh, so each half is a token."""
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def replace_unicode_punctuation(text: str) -> str:
    """Moses' replace-unicode-punctuation.perl, through sacremoses: "“Ja”, sagte er…" -> "\"Ja\", sagte er..."."""
    from sacremoses import MosesPunctNormalizer

    return MosesPunctNormalizer().replace_unicode_punct(text)


def moses_tokenize(lines: list[str], lang: str) -> list[str]:
    """Moses tokenizer.perl (-l lang, with its HTML escaping), through sacremoses."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line, return_str=True, escape=True) for line in lines]


def tokenized_bleu(hypotheses: list[str], references: list[str], lang: str = "de") -> Score:
    """The paper-style BLEU: punctuation replaced (hypotheses), Moses tokenisation, German compounds split,
    BLEU on tokens (multi-bleu.perl)."""
    _check(hypotheses, references)
    hyp = moses_tokenize([replace_unicode_punctuation(line) for line in hypotheses], lang)
    ref = moses_tokenize(references, lang)
    steps = f"hyp replace-unicode-punctuation|moses -l {lang}"
    if lang == "de":  # get_ende_bleu.sh's ##AT## split is for German compounds; "peut-être" stays whole
        hyp, ref = [split_compounds(line) for line in hyp], [split_compounds(line) for line in ref]
        steps += "|compound-split"
    metric = BLEU(tokenize="none", smooth_method="none", force=True)  # multi-bleu: no smoothing
    result = metric.corpus_score(hyp, [ref])
    return Score("tokenised BLEU", result.score, f"{steps}|multi-bleu")


@torch.inference_mode()
def perplexity(
    model: Transformer,
    sources: list[list[int]],
    targets: list[list[int]],
    batch_size: int = 32,
    device: str | torch.device = "cpu",
) -> tuple[float, int]:
    """Per-word-piece perplexity of the targets (ids ending in </s>) given the sources, and the token count."""
    cfg = model.config
    model.eval()
    nll, n = 0.0, 0
    for start in range(0, len(sources), batch_size):
        src = _pad(sources[start : start + batch_size], cfg.pad_id, device)  # (B, S)
        tgt = _pad(targets[start : start + batch_size], cfg.pad_id, device)  # (B, T)
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], cfg.bos_id), tgt[:, :-1]], dim=1)  # shifted right
        logits = model(src, tgt_in)  # (B, T, V)
        mask = tgt != cfg.pad_id
        nll += F.cross_entropy(logits[mask].float(), tgt[mask], reduction="sum").item()
        n += int(mask.sum())
    return math.exp(nll / max(n, 1)), n


def _pad(seqs: list[list[int]], pad_id: int, device: str | torch.device) -> torch.Tensor:
    S = max(len(s) for s in seqs)
    return torch.tensor([s + [pad_id] * (S - len(s)) for s in seqs], dtype=torch.long, device=device)
