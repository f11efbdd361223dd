"""The Transformer: encoder and decoder stacks (§3.1, Figure 1), tied embeddings (§3.4).

Dimension legend: B batch, S source length, T target length, D d_model, V vocabulary, h heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import KeyValue, KVCache
from .embedding import Positions, TokenEmbedding, sinusoid_table
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, padding_mask


class Attention(NamedTuple):
    """Attention weights per layer, each (B, h, T_q, T_k): the three uses of §3.2.3."""

    encoder: list[Tensor]  # encoder self-attention, (B, h, S, S)
    decoder: list[Tensor]  # masked decoder self-attention, (B, h, T, T)
    cross: list[Tensor]  # encoder-decoder attention, (B, h, T, S)


class Output(NamedTuple):
    logits: Tensor  # (B, T, V)
    attention: Attention


@dataclass
class DecoderState:
    """What incremental decoding carries from one step to the next; decode_step fills it in place.

    Its rows are hypotheses. With beam search, rows b*K .. b*K+K-1 are the K beams of sentence b,
    and they all read that sentence's one copy of the encoder keys/values.
    """

    src_mask: Tensor  # (B, 1, 1, S), True = may attend
    memory_kv: list[KeyValue]  # per decoder layer, encoder keys/values (B, h, S, d_k), computed once
    self_kv: list[KVCache] = field(default_factory=list)  # per layer, t positions of (B*K, h, d_k)
    spare: Tensor | None = None  # a free buffer shaped like the caches', reused by index_select

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.self_kv[0].length if self.self_kv else 0

    @property
    def rows(self) -> int:
        """Hypotheses (B*K)."""
        return self.self_kv[0].k.size(1) if self.self_kv else self.src_mask.size(0)

    def index_select(self, index: Tensor, sentences: Tensor | None = None) -> DecoderState:
        """Keep or reorder rows (beam reordering, dropping finished sentences); this state is used up.

        index (N',) picks the hypotheses. The encoder side follows index while there is one hypothesis
        per sentence; with beams, `sentences` (B',) picks the sentences kept (None: all, unchanged).
        Each cache is copied once, into the spare buffer, whose place the old buffer then takes.
        """
        if sentences is None and self.rows == self.src_mask.size(0):
            sentences = index
        memory_kv, src_mask = self.memory_kv, self.src_mask
        if sentences is not None:
            memory_kv = [kv.index_select(sentences) for kv in memory_kv]
            src_mask = src_mask.index_select(0, sentences)
        t, spare, buffers = self.length, self.spare, []
        # Row j of position p sits at p * N + j of a (t * N, h * d_k) view: one row-wise select per
        # buffer, about twice as fast as index_select along dim 1 of (t, N, h, d_k).
        flat = (torch.arange(t, device=index.device)[:, None] * self.rows + index).view(-1)  # (t * N',)
        for buffer in (b for cache in self.self_kv for b in (cache.k, cache.v)):
            shape = (buffer.size(0), len(index), *buffer.shape[2:])
            if spare is None or spare.shape != shape:
                spare = buffer.new_empty(shape)
            torch.index_select(buffer[:t].flatten(0, 1).flatten(1), 0, flat, out=spare[:t].flatten(0, 1).flatten(1))
            buffers.append(spare)
            spare = buffer if buffer.shape == shape else None
        caches = [KVCache(k, v, t) for k, v in zip(buffers[::2], buffers[1::2])]
        return DecoderState(src_mask, memory_kv, caches, spare)


class Encoder(nn.Module):
    """N identical layers over embedded, position-encoded source tokens (§3.1)."""

    def __init__(self, config: ModelConfig, embed: TokenEmbedding, positions: Positions):
        super().__init__()
        self.embed, self.positions = embed, positions
        self.dropout = nn.Dropout(config.p_drop)  # on embedding + position sums (§5.4)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_layers))

    def forward(self, src: Tensor, src_mask: Tensor, weights: list | None = None) -> Tensor:
        """src (B, S) ids -> z (B, S, D); appends each layer's weights to `weights` when given."""
        x = self.dropout(self.embed(src) + self.positions(src.size(1)))
        for layer in self.layers:
            x, w = layer(x, src_mask, need_weights=weights is not None)
            if weights is not None:
                weights.append(w)
        return x


class Decoder(nn.Module):
    """N identical layers over the shifted-right target, reading the encoder output z (§3.1)."""

    def __init__(self, config: ModelConfig, embed: TokenEmbedding, positions: Positions):
        super().__init__()
        self.embed, self.positions = embed, positions
        self.dropout = nn.Dropout(config.p_drop)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))

    def memory_kv(self, memory: Tensor) -> list[KeyValue]:
        """Each layer's encoder-decoder keys and values of z (B, S, D)."""
        return [layer.cross_attn.project_kv(memory) for layer in self.layers]

    def forward(
        self, tgt: Tensor, state: DecoderState, weights: Attention | None = None
    ) -> tuple[Tensor, list[KeyValue]]:
        """tgt (B, T) ids of the positions after the cached ones -> hidden (B, T, D), new caches."""
        offset, T = state.length, tgt.size(1)
        y = self.dropout(self.embed(tgt) + self.positions(T, offset))
        # A single new position may read every cached one; only a block of T > 1 needs the triangle.
        self_mask = causal_mask(T, offset + T, tgt.device) if T > 1 else None
        new_kv = []
        for i, layer in enumerate(self.layers):
            cache = state.self_kv[i] if state.self_kv else None
            y, kv, (w_self, w_cross) = layer(
                y, state.memory_kv[i], self_mask, state.src_mask, cache, need_weights=weights is not None
            )
            new_kv.append(kv)
            if weights is not None:
                weights.decoder.append(w_self)
                weights.cross.append(w_cross)
        return y, new_kv


class Transformer(nn.Module):
    """The encoder-decoder model of Figure 1: `model(src_ids, tgt_in_ids)` -> logits (B, T, V).

    Masks come from `config.pad_id`. Target padding needs no mask of its own: the causal mask keeps
    every real position from reading the pads after it, and pad positions are ignored by the loss.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        positions = Positions(config)  # one table serves both stacks
        src_embed = TokenEmbedding(config.vocab_size, config)
        tgt_embed = src_embed if config.share_embeddings else TokenEmbedding(config.target_vocab_size, config)
        self.encoder = Encoder(config, src_embed, positions)
        self.decoder = Decoder(config, tgt_embed, positions)
        # Marian's final logits bias: a saved buffer, not trained, as Hugging Face holds it (and counts it).
        self.register_buffer("logits_bias", torch.zeros(config.target_vocab_size) if config.final_logits_bias else None)
        if not config.tie_output:
            self.output_proj = nn.Linear(config.d_model, config.target_vocab_size, bias=False)
        self._init_linear_weights()

    @classmethod
    def from_state_dict(cls, config: ModelConfig, state_dict: dict[str, Tensor]) -> Transformer:
        """A model that holds the given tensors themselves: no random weights are made first.

        Built on the meta device, then given the tensors themselves (as aiayn.io.read_safetensors
        reads them), so loading needs the weights' memory once rather than twice.
        """
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict(state_dict, assign=True)
        device = next(iter(state_dict.values())).device
        for module in model.modules():  # the sinusoid table is not saved: compute it for real
            if isinstance(module, Positions) and module.table.is_meta:
                module.table = sinusoid_table(config.max_len, config.d_model, config.sinusoid_layout).to(device)
        return model

    def _init_linear_weights(self) -> None:
        """Xavier-uniform projections and zero biases, as in tensor2tensor; the paper does not say."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def encode(self, src: Tensor, weights: list | None = None) -> tuple[Tensor, Tensor]:
        """src (B, S) -> z (B, S, D) and the source padding mask (B, 1, 1, S)."""
        src_mask = padding_mask(src, self.config.pad_id)
        return self.encoder(src, src_mask, weights), src_mask

    def start_state(self, memory: Tensor, src_mask: Tensor) -> DecoderState:
        """The decoding state before any target token: the encoder keys/values, computed once."""
        return DecoderState(src_mask, self.decoder.memory_kv(memory))

    def project(self, hidden: Tensor, out: Tensor | None = None) -> Tensor:
        """Pre-softmax linear transformation (§3.4), tied to the target embedding: (..., D) -> (..., V).

        out: a (B, V) buffer for the logits of hidden (B, D), reused from step to step by decoding.
        """
        proj = getattr(self, "output_proj", None)
        if out is not None and out.dtype != hidden.dtype:
            out = None  # e.g. float16 logits, which decoding turns into float32 log-probabilities itself
        if proj is not None and not isinstance(proj, nn.Linear):
            return proj(hidden, out)  # a replacement that carries the bias, e.g. int8 (aiayn.decode.quantize)
        weight = self.decoder.embed.weight if proj is None else proj.weight
        if out is None:
            return F.linear(hidden, weight, self.logits_bias)
        torch.mm(hidden, weight.t(), out=out)  # then add the bias: faster than addmm's broadcast copy
        return out if self.logits_bias is None else out.add_(self.logits_bias)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, weights: Attention | None = None) -> Tensor:
        """Teacher-forced decoding of tgt (B, T) against z: logits (B, T, V)."""
        hidden, _ = self.decoder(tgt, self.start_state(memory, src_mask), weights)
        return self.project(hidden)

    def forward(self, src: Tensor, tgt_in: Tensor, return_attention: bool = False) -> Tensor | Output:
        """src (B, S), tgt_in (B, T) shifted right -> logits (B, T, V), or Output with the weights."""
        weights = Attention([], [], []) if return_attention else None
        memory, src_mask = self.encode(src, weights.encoder if weights else None)
        logits = self.decode(tgt_in, memory, src_mask, weights)
        return Output(logits, weights) if return_attention else logits

    def decode_step(self, tokens: Tensor, state: DecoderState, out: Tensor | None = None) -> tuple[Tensor, DecoderState]:
        """Incremental decoding: the newest tokens (B, 1) -> logits (B, V) (into out if given) and the state."""
        if not state.self_kv:  # the first step makes the caches; they grow as needed
            like, capacity = state.memory_kv[0].k, min(64, self.config.max_len)
            caches = [KVCache.empty(like, tokens.size(0), capacity) for _ in self.decoder.layers]
            state = DecoderState(state.src_mask, state.memory_kv, caches)
        hidden, _ = self.decoder(tokens, state)
        return self.project(hidden[:, -1], out), state

    def num_parameters(self, count_positions: bool = False) -> int:
        """Trainable parameters, each shared tensor once (sinusoids are a fixed buffer, not counted).

        count_positions=True adds frozen sinusoid tables for the encoder and the decoder, max_len x D
        each, the way Hugging Face counts Marian's two position tables.
        """
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a tied tensor once
        if count_positions and self.config.positions == "sinusoidal":
            n += 2 * self.config.max_len * self.config.d_model
        return n

    def parameter_counts(self) -> dict[str, int]:
        """Parameters by part: embeddings (a shared matrix once), encoder layers, decoder layers, rest."""
        embeddings = {id(e.weight): e.weight.numel() for e in (self.encoder.embed, self.decoder.embed)}
        counts = {
            "embeddings": sum(embeddings.values()),
            "encoder": sum(p.numel() for p in self.encoder.layers.parameters()),
            "decoder": sum(p.numel() for p in self.decoder.layers.parameters()),
        }
        counts["other"] = self.num_parameters() - sum(counts.values())  # learned positions, untied output
        return counts
