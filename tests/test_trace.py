"""One position's computation (aiayn.model.trace) against the model: every stage equals what the model computes,
recomputed here from its weights or read from its own outputs (attention weights, encoder states, logits)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from aiayn.model.trace import trace
from aiayn.weights import load_model
from test_translate import build_tiny_model_dir, data_dir  # noqa: F401  (a fixture)


@pytest.fixture(scope="module")
def model(tmp_path_factory, data_dir):
    return load_model(build_tiny_model_dir(tmp_path_factory.mktemp("trace"), data_dir)).eval()


@pytest.fixture(scope="module")
def pair(model):
    torch.manual_seed(3)
    V, config = model.config.vocab_size, model.config
    src = torch.randint(4, V, (1, 9))
    tgt_in = torch.cat([torch.tensor([[config.bos_id]]), torch.randint(4, V, (1, 6))], dim=1)
    with torch.no_grad():
        out = model(src, tgt_in, return_attention=True)
    return src, tgt_in, out


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


@pytest.mark.parametrize("position", [0, 4])
def test_a_source_position_through_the_first_layer_is_the_models_computation(model, pair, position):
    src, tgt_in, out = pair
    t = trace(model, src, tgt_in, "source", position, layer=0)
    block, d = model.encoder.layers[0], model.config.d_model
    token = int(src[0, position])
    assert close(t["embedding"], model.encoder.embed.weight[token] * math.sqrt(d))  # §3.4's scaling
    assert close(t["input"], torch.tensor(t["embedding"]) + torch.tensor(t["positional_encoding"]))
    a = t["self_attention"]
    assert close(a["weights"], out.attention.encoder[0][0, :, position])  # (h, S): the model's own weights
    assert close(a["scaled"], torch.tensor(a["scores"]) / math.sqrt(block.self_attn.d_k))
    assert close(torch.tensor(a["heads"]).flatten(), a["concat"])
    with torch.no_grad():
        attn_out = F.linear(torch.tensor(a["concat"]), block.self_attn.out_proj.weight, block.self_attn.out_proj.bias)
        assert close(a["output"], attn_out)
        x = block.self_attn_layer_norm(torch.tensor(t["input"]) + attn_out)  # residual, then LayerNorm (§3.1)
        assert close(t["self_attention_norm"], x)
        ffn = block.ffn.fc2(torch.relu(block.ffn.fc1(x)))  # §3.3
        assert close(t["ffn"], ffn) and close(t["output"], block.final_layer_norm(x + ffn))


def test_the_last_layers_output_is_the_encoders_and_the_norms_follow_the_stream(model, pair):
    src, tgt_in, _ = pair
    last = len(model.encoder.layers) - 1
    t = trace(model, src, tgt_in, "source", 2, layer=last)
    with torch.no_grad():
        memory, _ = model.encode(src)
    assert close(t["output"], memory[0, 2])
    assert t["residual_norms"][last]["final_norm"] == pytest.approx(float(memory[0, 2].norm()), rel=1e-5)


def test_a_target_position_sees_no_later_one_and_ends_in_the_models_logits(model, pair):
    src, tgt_in, out = pair
    layer, position = 1, 3
    t = trace(model, src, tgt_in, "target", position, layer=layer)
    assert t["self_attention"]["masked"] == [k > position for k in range(tgt_in.size(1))]
    assert all(w == 0.0 for row in t["self_attention"]["weights"] for w in row[position + 1 :])
    assert close(t["self_attention"]["weights"], out.attention.decoder[layer][0, :, position])
    assert close(t["cross_attention"]["weights"], out.attention.cross[layer][0, :, position])
    config = model.config
    logits = out.logits[0, position].clone()
    logits[[config.pad_id, config.bos_id]] = -math.inf
    top = logits.softmax(-1).topk(10)
    assert t["logits"]["ids"] == top.indices.tolist() and close(t["logits"]["probs"], top.values)


def test_bad_positions_sides_and_layers_are_refused(model, pair):
    src, tgt_in, _ = pair
    for args, message in [
        (("middle", 0, 0), "side must be source or target"),
        (("source", 9, 0), "position 9 is out of range: 0 to 8"),
        (("target", 0, 7), "layer 7 is out of range: 0 to 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            trace(model, src, tgt_in, *args)


def test_a_marian_model_is_traced_too(tmp_path):
    """Marian's layout (shared embeddings, the sinusoids' halves, a final logits bias): the same agreement."""
    from aiayn.model_folder import load_any
    from test_marian import build_marian

    model = load_any(build_marian(tmp_path / "opus-mt"))[0].eval()
    config = model.config
    src = torch.randint(0, config.vocab_size - 1, (1, 7))
    tgt_in = torch.tensor([[config.bos_id, 5, 9, 11]])
    with torch.no_grad():
        out = model(src, tgt_in, return_attention=True)
    t = trace(model, src, tgt_in, "target", 2, layer=2)
    assert close(t["cross_attention"]["weights"], out.attention.cross[2][0, :, 2])
    assert close(t["positional_encoding"], model.decoder.positions(4)[2])
    logits = out.logits[0, 2].clone()
    logits[[config.pad_id, config.bos_id]] = -math.inf
    assert t["logits"]["ids"] == logits.softmax(-1).topk(10).indices.tolist()
