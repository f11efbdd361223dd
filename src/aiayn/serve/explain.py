"""What /api/explain answers: tokens, every layer and head of the three attentions (§3.2.3), the beam tree.

Runs on the model worker's thread. The attention is that of one teacher-forced pass over the
tree's best translation, which begins with the forced prefix when one is given.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..decode.explain import beam_tree, check_prefix, teacher_forced_attention
from ..decode.sampling import next_distribution, sample_after
from ..decode.step import search_limits
from ..model import Transformer
from ..model.trace import trace
from ..model_folder import load_any
from ..translator import Translator
from .limits import ApiError
from .neighbours import NeighbourIndex, Reference, encode
from .schemas import ExplainRequest, NeighboursRequest, NextRequest, SampleRequest, StepRequest


class Inspector:
    """A translator's model and tokenizer, answering explain requests; folder: where the model was loaded from, whose
    plain float32 model the step-through reads (loaded once, when first asked for); reference: the text whose
    tokens the neighbours view searches (its index built when first asked for), or None and why there is none."""

    def __init__(
        self, translator: Translator, folder: Path | None = None, reference: tuple[Reference | None, str] = (None, "")
    ):
        self.translator, self.folder, self._paper_model = translator, folder, None
        self.reference, self.no_reference = reference
        self.index: NeighbourIndex | None = None
        self.indexing = asyncio.Lock()  # one build at a time: requests that arrive meanwhile wait for it
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

    def paper_model(self) -> Transformer:
        """The model as the paper computes it (float32, model/'s modules), whatever the server decodes with."""
        if self._paper_model is None:
            if self.folder is None:
                raise ApiError(501, None, "this model was served without its folder: no step-through")
            self._paper_model = load_any(self.folder)[0].eval()
        return self._paper_model

    def step(self, request: StepRequest, src_ids: list[int]) -> dict[str, Any]:
        """`model.trace` of the request's position, its source and the target text after <s> teacher-forced."""
        model = self.paper_model()
        bos = model.config.bos_id
        target = self.translator.tokenizer.encode_target([request.target])[0][:-1] if request.target else []
        tgt_in = [bos, *target]
        if len(tgt_in) > (model.config.max_len or len(tgt_in)):
            raise ApiError(
                422, "target", f"target: {len(tgt_in)} positions, more than the model's {model.config.max_len}"
            )
        try:
            traced = trace(
                model, torch.tensor([src_ids]), torch.tensor([tgt_in]), request.side, request.position, request.layer
            )
        except ValueError as err:
            field = "layer" if "layer" in str(err) else "position"
            raise ApiError(422, field, f"{field}: {err}") from None
        return {
            "source_tokens": self.source_pieces(src_ids),
            "target_in_tokens": self.target_pieces(tgt_in),
            **traced,
        }

    def next_tokens(self, request: NextRequest, src_ids: list[int]) -> dict[str, Any]:
        """The request.top_k most likely pieces after the prefix, with their probabilities (`next_distribution`)."""
        step, src, prefix = self.start(request, src_ids)
        probs = next_distribution(step, src, prefix, request.temperature)
        top = probs.topk(min(request.top_k, probs.numel()))
        ids = top.indices.tolist()
        return {"tokens": self.target_pieces(ids), "ids": ids, "probs": top.values.tolist()}

    def sample(self, request: SampleRequest, src_ids: list[int]) -> dict[str, Any]:
        """A continuation of the prefix drawn with the request's temperature, top-k and seed (`sample_after`)."""
        step, src, prefix = self.start(request, src_ids)
        config = self.translator.config.replace(temperature=request.temperature, top_k=request.top_k or 0, top_p=1.0)
        if request.max_len is not None:
            config = config.replace(max_len=len(prefix) + request.max_len)
        generator = torch.Generator(device=src.device).manual_seed(request.seed)
        ids, probs = sample_after(step, src, prefix, config, generator)
        text = self.translator.tokenizer.decode(ids)
        return {"text": text, "tokens": self.target_pieces(ids), "ids": ids, "probs": probs}

    def start(self, request: NextRequest | SampleRequest, src_ids: list[int]) -> tuple[Any, Tensor, list[int]]:
        """The step model, the source (1, S) and the prefix's pieces; a prefix the model could not have written is a
        422."""
        src = torch.tensor([src_ids], device=self.translator.device)
        prefix = self.translator.tokenizer.encode_target([request.prefix])[0][:-1] if request.prefix else []
        step = self.translator.step_model()
        try:
            check_prefix(step, prefix, int(search_limits(step, src, self.translator.config)[0]))
        except ValueError as err:
            raise ApiError(422, "prefix", f"prefix: {err}") from None
        return step, src, prefix

    def neighbours(self, request: NeighboursRequest, src_ids: list[int]) -> dict[str, Any]:
        """The request.k reference tokens whose encoder states are nearest the source piece at request.position (the
        index built: `NeighbourIndex.build`, as the app does when first asked)."""
        assert self.index is not None
        z = encode(self.translator, [src_ids])[0]  # (S, D)
        tokens = self.source_pieces(src_ids)
        return {
            "source_tokens": tokens,
            "position": request.position,
            "token": tokens[request.position],
            "index": self.index.describe(),
            "neighbours": self.index.nearest(z[request.position], request.k),
        }

    def build_index(self, sample: list[str], lines: int) -> None:
        """The neighbours' index of sentences sampled from the reference text (on the model thread)."""
        assert self.reference is not None
        self.index = NeighbourIndex.build(self.translator, self.reference.name, sample, lines, self.source_pieces)

    def reference_failed(self, err: BaseException) -> ApiError:
        """A reference text that could not be read or indexed: said from now on, never tried again."""
        self.reference, self.no_reference = None, f"the reference text cannot be used: {err}"
        return ApiError(404, "model", self.no_reference)

    def describe_reference(self) -> dict[str, Any]:
        """What /api/model says of the neighbours view: its text (and index, once built), or why there is none."""
        if self.index is not None:
            return {"available": True, "built": True, **self.index.describe()}
        if self.reference is not None:
            return {"available": True, "built": False, "source": self.reference.name}
        return {"available": False, "why": self.no_reference}

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
