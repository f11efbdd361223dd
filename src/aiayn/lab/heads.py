"""Multi-head attention of a trained model (§3.2.2 and the appendix's figures): where "it" looks.

The appendix shows layer 5 of 6 of the encoder; the default here is likewise the layer before the last.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..model import Transformer
from .anatomy import pieces, source_ids

SENTENCES = {  # the appendix's sentence, in the model's source language
    "en": "The animal didn't cross the street because it was too tired.",
    "de": "Das Tier überquerte die Straße nicht, weil es zu müde war.",
    "fr": "L'animal n'a pas traversé la rue parce qu'il était trop fatigué.",
}
PRONOUNS = {"en": ("it",), "de": ("er", "es", "sie"), "fr": ("il", "elle")}


def find_word(tokens: list[str], words: tuple[str, ...]) -> int | None:
    """The index of the first piece that is one of `words` (ignoring case and the "▁" space mark)."""
    for i, piece in enumerate(tokens):
        if piece.replace("▁", "").strip().lower() in words:
            return i
    return None


@torch.no_grad()
def attention_maps(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, np.ndarray]:
    """All attention weights for one sentence pair: encoder (L, h, S, S), decoder (L, h, T, T), cross (L, h, T, S)."""
    model.eval()
    out = model(src, tgt_in, return_attention=True)
    att = out.attention
    return {
        name: torch.stack([w[0] for w in getattr(att, name)]).float().numpy()
        for name in ("encoder", "decoder", "cross")
    }


def default_layer(model: Transformer) -> int:
    """The encoder layer before the last (0-based), as the appendix's layer 5 of 6."""
    return max(model.config.n_layers - 2, 0)


@torch.no_grad()
def where_it_looks(
    model: Transformer,
    tokenizer: Any,
    sentence: str,
    output_ids: list[int],
    words: tuple[str, ...] = ("it",),
    layer: int | None = None,
    pronouns: tuple[str, ...] = PRONOUNS["de"],
) -> dict[str, Any]:
    """Every head of one encoder layer, the row of the word `words` names, and the output pronoun's
    encoder-decoder attention (averaged over heads, per decoder layer) when the translation has one."""
    cfg = model.config
    layer = default_layer(model) if layer is None else layer
    if not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer {layer} is not an encoder layer (0 .. {cfg.n_layers - 1})")
    src = source_ids(tokenizer, sentence)  # (1, S)
    tgt_in = torch.tensor([[cfg.bos_id] + output_ids[:-1]])  # (1, T)
    maps = attention_maps(model, src, tgt_in)
    src_pieces, out_pieces = pieces(tokenizer, src[0].tolist(), "source"), pieces(tokenizer, output_ids)
    it = find_word(src_pieces, words)
    result: dict[str, Any] = {
        "layer": layer,
        "source_pieces": src_pieces,
        "output_pieces": out_pieces,
        "heads": maps["encoder"][layer],
        "word_index": it,
    }  # heads (h, S, S)
    if it is not None:
        rows = maps["encoder"][layer][:, it]  # (h, S): where the word looks, head by head
        result["word_rows"] = rows
        result["word_top"] = [src_pieces[int(j)] for j in rows.argmax(axis=1)]
    pronoun = find_word(out_pieces, pronouns)
    result["pronoun_index"] = pronoun
    if pronoun is not None:
        result["pronoun_cross"] = maps["cross"][:, :, pronoun].mean(axis=1)  # (L, S): mean over heads
    return result


APPENDIX = (  # the sentences of the paper's attention figures (Figures 3 and 4-5), English
    "It is in this spirit that a majority of American governments have passed new laws since 2009 making the "
    "registration or voting process more difficult.",
    "The Law will never be perfect, but its application should be just - this is what we are missing, in my opinion.",
)


def words_of(pieces_: list[str]) -> list[list[int]]:
    """The pieces of each word: a word starts at a piece with the "▁" space mark (and </s> is a word of its own)."""
    words: list[list[int]] = []
    for i, piece in enumerate(pieces_):
        if not words or piece.startswith("▁") or piece == "</s>" or pieces_[i - 1] == "</s>":
            words.append([i])
        else:
            words[-1].append(i)
    return words


def merge_to_words(weights: np.ndarray, words: list[list[int]]) -> np.ndarray:
    """Attention between pieces (..., S, S) as attention between words (..., W, W): a query word's row is the mean
    of its pieces' rows, and its weight on a key word the sum over that word's pieces, so rows still sum to 1."""
    by_key = np.stack([weights[..., w].sum(axis=-1) for w in words], axis=-1)  # (..., S, W)
    return np.stack([by_key[..., w, :].mean(axis=-2) for w in words], axis=-2)  # (..., W, W)


@torch.no_grad()
def appendix_attention(model: Transformer, tokenizer: Any, layer: int | None = None) -> list[dict[str, Any]]:
    """The encoder self-attention of the appendix's sentences in one layer (default: the one before the last), per
    head and averaged over the heads, between whole words."""
    cfg = model.config
    layer = default_layer(model) if layer is None else layer
    out = []
    for sentence in APPENDIX:
        src = source_ids(tokenizer, sentence)  # (1, S)
        maps = attention_maps(model, src, torch.tensor([[cfg.bos_id]]))["encoder"][layer]  # (h, S, S)
        src_pieces = pieces(tokenizer, src[0].tolist(), "source")
        words = words_of(src_pieces)
        heads = merge_to_words(maps, words)  # (h, W, W)
        labels = ["".join(src_pieces[i] for i in w).replace("▁", "") for w in words]
        out.append({"sentence": sentence, "layer": layer, "words": labels, "heads": heads, "mean": heads.mean(0)})
    return out
