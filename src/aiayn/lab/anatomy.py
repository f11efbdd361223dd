"""A trained Transformer translating one sentence (§3, Figure 1): its sizes, its shapes and its tokens."""

from __future__ import annotations

from typing import Any

import torch

from .. import cpu
from ..config import DecodeConfig
from ..decode.beam import beam_search
from ..model import Transformer


def pieces(tokenizer: Any, ids: list[int], side: str = "target") -> list[str]:
    """The word pieces of ids, one string per id: aiayn's one shared vocabulary, or a Marian tokenizer's source
    (vocab.json) or target vocabulary (side "source" or "target")."""
    if hasattr(tokenizer, "pieces"):
        return list(tokenizer.pieces(ids))
    if side == "source":
        table = {i: p for p, i in tokenizer.vocab.items()}
        return [table.get(int(i), f"<{i}>") for i in ids]
    return [tokenizer.id_to_piece.get(int(i), f"<{i}>") for i in ids]


def source_ids(tokenizer: Any, sentence: str) -> torch.Tensor:
    """The source ids of one sentence, ending in </s>: (1, S)."""
    if not sentence.strip():
        raise ValueError("the sentence to translate is empty")
    return torch.tensor(tokenizer.encode_source([sentence]), dtype=torch.long)


@torch.no_grad()
def translate_one(model: Transformer, tokenizer: Any, sentence: str, beam_size: int = 4) -> dict[str, Any]:
    """Translate `sentence` with beam search (§6.1) and describe every shape on the way."""
    model.eval()
    cfg = model.config
    src = source_ids(tokenizer, sentence)  # (1, S)
    hyp = beam_search(cpu.step_model(model), src, DecodeConfig(beam_size=beam_size))[0][0]
    out = list(hyp.tokens)  # generated ids, ending in </s> unless cut at the length limit
    tgt_in = torch.tensor([[cfg.bos_id] + out[:-1]])  # (1, T): shifted right
    memory, _ = model.encode(src)  # (1, S, D)
    logits = model(src, tgt_in)  # (1, T, V)
    return {
        "sentence": sentence,
        "translation": tokenizer.decode(out),
        "source_pieces": pieces(tokenizer, src[0].tolist(), "source"),
        "output_pieces": pieces(tokenizer, out),
        "output_ids": out,
        "config": {
            "encoder layers": cfg.n_layers,
            "decoder layers": cfg.decoder_layers,
            "d_model": cfg.d_model,
            "heads": cfg.n_heads,
            "d_ff": cfg.d_ff,
            "vocabulary": cfg.target_vocab_size,
        },
        "parameters": model.num_parameters(),
        "parameter_counts": model.parameter_counts(),
        "shapes": {
            "source ids": tuple(src.shape),
            "encoder output z": tuple(memory.shape),
            "decoder input (shifted right)": tuple(tgt_in.shape),
            "logits": tuple(logits.shape),
        },
        "log_prob": float(hyp.log_prob),
    }
