"""What /api/explain answers: tokens, every layer and head of the three attentions (§3.2.3), the beam tree.

Runs on the model worker's thread. The attention is that of one teacher-forced pass over the
tree's best translation, which begins with the forced prefix when one is given.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..decode.explain import beam_tree, teacher_forced_attention
from ..translator import Translator
from .limits import ApiError
from .schemas import ExplainRequest


class Inspector:
    """A translator's model and tokenizer, answering explain requests."""

    def __init__(self, translator: Translator):
        self.translator = translator
        tokenizer = translator.tokenizer
        if hasattr(tokenizer, "pieces"):  # aiayn's one shared vocabulary
            self.source_pieces = self.target_pieces = tokenizer.pieces
        else:  # Marian: vocab.json ids, maybe a separate target vocabulary
            source = {i: p for p, i in tokenizer.vocab.items()}
            self.source_pieces = lambda ids: [source.get(int(i), f"<{i}>") for i in ids]
            self.target_pieces = lambda ids: [tokenizer.id_to_piece.get(int(i), f"<{i}>") for i in ids]

    def prefix(self, request: ExplainRequest) -> list[int]:
        """The forced target prefix: target_ids as given, or the target text's pieces without </s>."""
        if request.target_ids is not None:
            return list(request.target_ids)
        if request.target:
            return self.translator.tokenizer.encode_target([request.target])[0][:-1]
        return []

    def explain(self, request: ExplainRequest, src_ids: list[int]) -> dict[str, Any]:
        translator = self.translator
        config = translator.decode_config(beam_size=request.beam_size, alpha=request.alpha, n_best=1).replace(
            sample=False
        )
        src = torch.tensor([src_ids], device=translator.device)  # (1, S)
        prefix = self.prefix(request)
        try:
            tree = beam_tree(translator.step_model(), src, config, prefix)
        except ValueError as err:
            field = "target_ids" if request.target_ids is not None else "target"
            raise ApiError(422, field, f"{field}: {err}") from None
        attention = teacher_forced_attention(translator.model, src, tree.best)
        bos = translator.model.config.bos_id
        nodes = tree.to_dict()["nodes"]
        for node in nodes:
            node["piece"] = self.target_pieces([node["token"]])[0]
            node["alternatives"] = [
                {"token": t, "piece": self.target_pieces([t])[0], "prob": p} for t, p in node["alternatives"]
            ]
        return {
            "source_tokens": self.source_pieces(src_ids),
            "source_ids": src_ids,
            "target_tokens": self.target_pieces(tree.best),
            "target_ids": tree.best,
            "target_in_tokens": self.target_pieces([bos] + tree.best[:-1]),
            "translation": translator.tokenizer.decode(tree.best),
            "forced": len(prefix),
            "beam_size": config.beam_size,
            "alpha": config.alpha,
            "score": tree.best_score,
            "attention": {
                name: [rounded(layer[0]) for layer in getattr(attention, name)]
                for name in ("encoder", "decoder", "cross")
            },
            "tree": {"nodes": nodes, "steps": tree.steps},
        }


def rounded(weights: Tensor) -> list:
    """(h, T_q, T_k) weights as nested lists, 6 decimals (the page shows 3)."""
    return weights.double().round(decimals=6).tolist()
