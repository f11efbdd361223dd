"""The Transformer: encoder and decoder stacks (§3.1, Figure 1), tied embeddings (§3.4).

Dimension legend: B batch, S source length, T target length, D d_model, V vocabulary, h heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import KeyValue, SelfAttentionCache
from .embedding import OutputProjection, Positions, TokenEmbedding, sinusoid_table
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
        self,
        tgt: Tensor,
        memory_kv: list[KeyValue],
        src_mask: Tensor,
        caches: Sequence[SelfAttentionCache] | None = None,
        weights: Attention | None = None,
    ) -> Tensor:
        """tgt (B, T) ids of the positions after the cached ones (all of them without caches) -> (B, T, D)."""
        offset, T = (caches[0].length if caches else 0), tgt.size(1)
        y = self.dropout(self.embed(tgt) + self.positions(T, offset))
        # A single new position may read every cached one; only a block of T > 1 needs the triangle.
        self_mask = causal_mask(T, offset + T, tgt.device) if T > 1 else None
        for i, layer in enumerate(self.layers):
            y, (w_self, w_cross) = layer(
                y, memory_kv[i], self_mask, src_mask, caches[i] if caches else None, need_weights=weights is not None
            )
            if weights is not None:
                weights.decoder.append(w_self)
                weights.cross.append(w_cross)
        return y


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
        self.output_proj = OutputProjection(
            config.d_model, config.target_vocab_size, tgt_embed if config.tie_output else None
        )
        self._init_linear_weights()

    @classmethod
    def from_state_dict(cls, config: ModelConfig, state_dict: dict[str, Tensor]) -> Transformer:
        """A model that holds the given tensors themselves: no random weights are made first.

        Built on the meta device, then given the tensors themselves (as aiayn.weights.read_safetensors
        reads them), so loading needs the weights' memory once rather than twice.
        """
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict(state_dict, assign=True)
        device = next(iter(state_dict.values())).device
        table = None  # the sinusoid table is not saved: computed once, and both stacks share it
        for module in model.modules():
            if isinstance(module, Positions) and module.table.is_meta:
                if table is None:
                    table = sinusoid_table(config.max_len, config.d_model, config.sinusoid_layout).to(device)
                module.table = table
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

    def project(self, hidden: Tensor) -> Tensor:
        """Pre-softmax linear transformation (§3.4), tied to the target embedding: (..., D) -> (..., V)."""
        return self.output_proj(hidden, self.logits_bias)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, weights: Attention | None = None) -> Tensor:
        """Teacher-forced decoding of tgt (B, T) against z: logits (B, T, V)."""
        return self.project(self.decoder(tgt, self.decoder.memory_kv(memory), src_mask, weights=weights))

    def forward(
        self, src: Tensor, tgt_in: Tensor, return_attention: bool = False, project: bool = True
    ) -> Tensor | Output:
        """src (B, S), tgt_in (B, T) shifted right -> logits (B, T, V), or Output with the weights.

        project=False stops before the pre-softmax projection and returns the decoder's output (B, T, D):
        training's loss multiplies it by the projection itself (cpu/fused_loss.py, projected_smoothed_nll).
        """
        weights = Attention([], [], []) if return_attention else None
        memory, src_mask = self.encode(src, weights.encoder if weights else None)
        hidden = self.decoder(tgt_in, self.decoder.memory_kv(memory), src_mask, weights=weights)  # (B, T, D)
        out = self.project(hidden) if project else hidden
        return Output(out, weights) if return_attention else out

    def decode_step(
        self, tokens: Tensor, memory_kv: list[KeyValue], src_mask: Tensor, caches: Sequence[SelfAttentionCache]
    ) -> Tensor:
        """Incremental decoding (§3.2.3): the newest tokens (N, T) -> logits (N, V) of the next one.

        memory_kv: `decoder.memory_kv(memory)`, the encoder keys/values computed once; caches: one
        per decoder layer (e.g. `ConcatCache()`), holding the earlier positions and given the new ones.
        N may be a multiple of the source batch: K hypotheses of a sentence share its memory.
        """
        return self.project(self.decoder(tokens, memory_kv, src_mask, caches)[:, -1])

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
