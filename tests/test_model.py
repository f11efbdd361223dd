"""The model against the paper's parameter counts and PyTorch's own nn.Transformer (§3)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aiayn import ModelConfig, Transformer
from aiayn.decode.step import TransformerStep
from aiayn.model import ConcatCache, padding_mask


@pytest.mark.parametrize("preset, expected, paper", [("base", 63_082_496, 65e6), ("big", 214_245_376, 213e6)])
def test_parameter_counts_match_table_3(preset, expected, paper):
    # Shared 37,000-token vocabulary, biases on every projection, no final norm, positions not counted.
    model = Transformer(ModelConfig.preset(preset, vocab_size=37000))
    assert model.num_parameters() == expected
    assert abs(expected - paper) / paper <= 0.03


def test_embeddings_are_tied_three_ways_and_two_ways():
    shared = Transformer(ModelConfig.preset("tiny", vocab_size=50))
    assert shared.encoder.embed.weight is shared.decoder.embed.weight
    assert shared.project(torch.ones(1, 64)).shape == (1, 50)
    two_way = Transformer(ModelConfig.preset("tiny", vocab_size=50, tgt_vocab_size=40, share_embeddings=False))
    assert two_way.encoder.embed.weight.shape == (50, 64)
    assert two_way.decoder.embed.weight.shape == (40, 64)
    assert two_way(torch.randint(4, 50, (2, 5)), torch.randint(4, 40, (2, 3))).shape == (2, 3, 40)


def reference_from(model: Transformer) -> nn.Transformer:
    """nn.Transformer (post-norm, ReLU) with the same weights and no final LayerNorms, as in the paper."""
    cfg = model.config
    kw = dict(d_model=cfg.d_model, nhead=cfg.n_heads, dim_feedforward=cfg.d_ff, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**kw), cfg.n_layers, norm=None, enable_nested_tensor=False
    )
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), cfg.n_layers, norm=None)
    ref = nn.Transformer(**kw, custom_encoder=encoder, custom_decoder=decoder)

    def copy_attention(dst: nn.MultiheadAttention, src) -> None:
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.k_proj.weight, src.v_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.k_proj.bias, src.v_proj.bias]))
        dst.out_proj.load_state_dict(src.out_proj.state_dict())

    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, encoder.layers):
            copy_attention(theirs.self_attn, ours.self_attn)
            theirs.linear1.load_state_dict(ours.ffn.fc1.state_dict())
            theirs.linear2.load_state_dict(ours.ffn.fc2.state_dict())
            theirs.norm1.load_state_dict(ours.self_attn_layer_norm.state_dict())
            theirs.norm2.load_state_dict(ours.final_layer_norm.state_dict())
        for ours, theirs in zip(model.decoder.layers, decoder.layers):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_attention(theirs.multihead_attn, ours.cross_attn)
            theirs.linear1.load_state_dict(ours.ffn.fc1.state_dict())
            theirs.linear2.load_state_dict(ours.ffn.fc2.state_dict())
            theirs.norm1.load_state_dict(ours.self_attn_layer_norm.state_dict())
            theirs.norm2.load_state_dict(ours.cross_attn_layer_norm.state_dict())
            theirs.norm3.load_state_dict(ours.final_layer_norm.state_dict())
    return ref.eval()


def test_equals_torch_nn_transformer_with_padding():
    cfg = ModelConfig.preset("tiny", vocab_size=30, n_layers=3)
    model = Transformer(cfg).eval()
    # The layers are the part under test: give the biases and norms non-trivial values too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    ref = reference_from(model)
    src = torch.randint(4, 30, (4, 9))
    tgt = torch.randint(4, 30, (4, 7))
    src[1, 6:] = cfg.pad_id  # padded sources
    src[3, 2:] = cfg.pad_id
    tgt[2, 4:] = cfg.pad_id  # padded targets
    with torch.no_grad():
        ours = model(src, tgt)
        x = model.encoder.embed(src) + model.encoder.positions(src.size(1))
        y = model.decoder.embed(tgt) + model.decoder.positions(tgt.size(1))
        pad = ~padding_mask(src, cfg.pad_id)[:, 0, 0]  # nn.Transformer marks pads with True
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        hidden = ref(x, y, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad)
        theirs = model.project(hidden)
        # Encoder outputs as well, at the real (non-pad) positions.
        enc_ours, _ = model.encode(src)
        enc_theirs = ref.encoder(x, src_key_padding_mask=pad)
    assert (ours - theirs).abs().max().item() <= 1e-5
    real = ~pad
    assert (enc_ours[real] - enc_theirs[real]).abs().max().item() <= 1e-5


def test_causality_and_source_padding():
    cfg = ModelConfig.preset("tiny", vocab_size=30)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 30, (2, 8))
    tgt = torch.randint(4, 30, (2, 6))
    with torch.no_grad():
        base = model(src, tgt)
        for j in range(1, tgt.size(1)):  # change target token j: no logit before j moves
            changed = tgt.clone()
            changed[:, j] = (changed[:, j] + 1 - 4) % 26 + 4
            out = model(src, changed)
            assert (out[:, :j] - base[:, :j]).abs().max().item() < 1e-6
            assert (out[:, j:] - base[:, j:]).abs().max().item() > 1e-4  # while position j does see it
        padded = torch.cat([src, torch.full((2, 5), cfg.pad_id)], dim=1)  # appending pads changes nothing
        assert (model(padded, tgt) - base).abs().max().item() < 1e-5


def test_self_attention_without_positions_is_permutation_equivariant():
    cfg = ModelConfig.preset("tiny", vocab_size=30)
    model = Transformer(cfg).eval()
    x = torch.randn(2, 7, cfg.d_model)  # already embedded, no positional encoding added
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    perm = torch.randperm(7)
    with torch.no_grad():
        out = x
        out_perm = x[:, perm]
        for layer in model.encoder.layers:
            out, _ = layer(out, mask)
            out_perm, _ = layer(out_perm, mask)
    assert (out[:, perm] - out_perm).abs().max().item() < 1e-5


def test_attention_weights_through_the_same_path():
    cfg = ModelConfig.preset("tiny", vocab_size=30)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 30, (2, 6))
    src[0, 4:] = cfg.pad_id
    tgt = torch.randint(4, 30, (2, 5))
    with torch.no_grad():
        out = model(src, tgt, return_attention=True)
        plain = model(src, tgt)
    att = out.attention
    assert (out.logits - plain).abs().max().item() < 1e-5  # the weights path computes the same logits
    assert len(att.encoder) == len(att.decoder) == len(att.cross) == cfg.n_layers
    assert att.encoder[0].shape == (2, cfg.n_heads, 6, 6)
    assert att.decoder[0].shape == (2, cfg.n_heads, 5, 5)
    assert att.cross[0].shape == (2, cfg.n_heads, 5, 6)
    assert torch.all(att.cross[1][0, :, :, 4:] == 0)  # padded source positions get exactly 0
    assert torch.all(att.decoder[0][:, :, 0, 1:] == 0)  # and future target positions
    for w in att.encoder + att.decoder + att.cross:
        assert torch.allclose(w.sum(-1), torch.ones(()), atol=1e-6)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        dict(activation="swish", sinusoid_layout="halves", final_logits_bias=True),
        dict(positions="learned", scale_embedding=False, n_decoder_layers=3),
    ],
)
def test_incremental_decoding_equals_teacher_forcing(overrides):
    cfg = ModelConfig.preset("tiny", vocab_size=30, **overrides)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 30, (3, 8))
    src[1, 5:] = cfg.pad_id
    tgt = torch.randint(4, 30, (3, 9))
    with torch.no_grad():
        full = model(src, tgt)  # (B, T, V), one teacher-forced pass
        memory, src_mask = model.encode(src)
        memory_kv, caches = model.decoder.memory_kv(memory), [ConcatCache() for _ in model.decoder.layers]
        steps = []
        for t in range(tgt.size(1)):
            steps.append(model.decode_step(tgt[:, t : t + 1], memory_kv, src_mask, caches))
    assert caches[0].length == tgt.size(1)
    assert (torch.stack(steps, 1) - full).abs().max().item() <= 1e-5


def test_incremental_decoding_past_the_first_cache_and_after_reordering():
    """The cache starts with 64 positions and doubles; reordering rows moves every layer's history."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=30, max_len=160)).eval()
    src, tgt = torch.randint(4, 30, (3, 8)), torch.randint(4, 30, (3, 150))
    order = torch.tensor([2, 0, 0])  # rows swapped and one repeated, halfway through
    with torch.no_grad():
        full = model(src, tgt)
        reordered = model(src[order], tgt[order])
        step_model = TransformerStep(model)
        state = step_model.start(src)
        steps = []
        for t in range(tgt.size(1)):
            if t == 75:
                state, steps = state.index_select(order, order), [s[order] for s in steps]
            log_probs, state = step_model.step(tgt[:, t : t + 1] if t < 75 else tgt[order, t : t + 1], state)
            steps.append(log_probs.clone())
    assert state.caches[0].k.size(0) == 256 and state.length == 150
    reordered, full = reordered.log_softmax(-1), full.log_softmax(-1)
    assert (torch.stack(steps, 1) - reordered).abs().max().item() <= 1e-5
    assert (reordered[1:] - full[[0, 0]]).abs().max().item() <= 1e-5


def test_info_command_prints_the_counts(capsys):
    from aiayn.cli import main

    assert main(["info", "--preset", "base", "--vocab-size", "37000"]) == 0
    out = capsys.readouterr().out
    assert "63,082,496" in out and "18,944,000" in out and "25,224,192" in out
