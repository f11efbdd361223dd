"""cpu/layer_step.py: a decoding step without training's wrappers gives the model's own decode_step's logits."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from aiayn import ModelConfig, Transformer
from aiayn.cpu import backend, layer_step
from aiayn.cpu.layout import for_decoding
from aiayn.cpu.quantize import quantize_int8
from aiayn.cpu.step import CpuStep
from aiayn.model.attention import ConcatCache

# Every backend this host can run: aiayn's own product needs a C compiler, the rest PyTorch with oneDNN.
BACKENDS = ["mkl"] + [
    name
    for name in backend.BACKENDS
    if name != "mkl"
    and backend.onednn_available()
    and (not backend.uses_gemv(name) or shutil.which(os.environ.get("CC") or "cc"))
]


def steps_both_ways(
    model: Transformer, src: torch.Tensor, tokens: torch.Tensor, hypotheses: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (steps, N, V) of tokens (N, steps) fed one at a time, by model.decode_step and by layer_step.decode_step;
    N = B x hypotheses rows, each sentence's hypotheses reading its one copy of the encoder's keys and values."""
    with torch.inference_mode():
        memory, src_mask = model.encode(src)
        memory_kv = model.decoder.memory_kv(memory)
        caches = {way: [ConcatCache() for _ in model.decoder.layers] for way in ("model", "lean")}
        model_logits, lean_logits = [], []
        for t in range(tokens.size(1)):
            step = tokens[:, t : t + 1]  # (N, 1)
            model_logits.append(model.decode_step(step, memory_kv, src_mask, caches["model"]).clone())
            lean_logits.append(layer_step.decode_step(model, step, memory_kv, src_mask, caches["lean"]).clone())
    return torch.stack(model_logits), torch.stack(lean_logits)


@pytest.mark.parametrize("gemm", [None, "int8"] + BACKENDS)
@pytest.mark.parametrize("hypotheses", [1, 3])
def test_the_step_without_wrappers_gives_the_models_logits(gemm, hypotheses):
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=40, activation="swish", final_logits_bias=True)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # every norm's gain and shift and every bias its own: a mix-up or a dropped bias shows
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(1.0 if param.size(0) == cfg.d_model else 0.0, 0.3)
        model.logits_bias.normal_()
    if gemm == "int8":
        quantize_int8(model)
    elif gemm is not None:
        for_decoding(model, gemm)
    assert CpuStep(model).uses_layer_step  # the modules decode/ puts in place do not keep a step from it
    src = torch.randint(4, 40, (2, 7))
    src[1, 4:] = cfg.pad_id  # a padded source: the encoder-decoder attention's mask matters
    tokens = torch.randint(4, 40, (2 * hypotheses, 6))
    model_logits, lean_logits = steps_both_ways(model, src, tokens, hypotheses)
    assert (model_logits - lean_logits).abs().max().item() <= 1e-5
    assert model_logits[0].std() > 0.1 and not torch.equal(model_logits[0], model_logits[1])  # real, changing logits


def test_the_search_takes_it_at_one_new_position_outside_training(monkeypatch):
    model = Transformer(ModelConfig.preset("tiny", vocab_size=30)).eval()
    one, two = torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long)
    assert layer_step.applies(model, one) and not layer_step.applies(model, two)
    assert not layer_step.applies(model.train(), one)
    model.eval()
    # What it repeats must be the model's own modules, unhooked and not training: else the model's step runs.
    assert layer_step.fits(model) and CpuStep(model).uses_layer_step
    model.decoder.layers[1].ffn.dropout.train()  # dropout kept on at inference
    assert not layer_step.fits(model)
    model.eval()
    handle = model.decoder.layers[0].self_attn.register_forward_hook(lambda *a: None)
    assert not layer_step.fits(model)
    handle.remove()
    assert layer_step.fits(model)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    assert not layer_step.fits(model)
    handle.remove()
    model.decoder.layers[0].ffn.forward = lambda x: x  # an instance's own forward, as accelerate's hooks set
    assert not layer_step.fits(model)
    del model.decoder.layers[0].ffn.forward
    assert layer_step.fits(model)
    calls = []
    monkeypatch.setattr(layer_step, "decode_step", lambda *a: calls.append(a) or model.decode_step(*a[1:]))
    step = CpuStep(model)
    with torch.inference_mode():
        step.step(torch.full((2, 1), model.config.bos_id), step.start(torch.randint(4, 30, (2, 5))))
    assert len(calls) == 1


@pytest.mark.parametrize("gemm", ["int8"] + BACKENDS)
def test_a_model_made_ready_to_decode_has_no_module_left_training(gemm):
    """New modules are made in training mode: attention dropout (p_attn_drop) would run while translating."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40, p_attn_drop=0.5, p_ffn_drop=0.5)).eval()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    with torch.no_grad():
        expected = model(src, tgt)
    quantize_int8(model) if gemm == "int8" else for_decoding(model, gemm)
    assert not [name for name, module in model.named_modules() if module.training]
    with torch.no_grad():
        first, second = model(src, tgt), model(src, tgt)
    assert torch.equal(first, second)
    if gemm != "int8":
        torch.testing.assert_close(first, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("gemm", [None, "int8"] + BACKENDS)
def test_the_activation_runs_in_place_only_on_a_product_of_its_own(gemm, monkeypatch):
    """W_1's output is activated in place where the module that made it is one of those whose outputs are their
    own (saving a fresh (N, d_ff) tensor); a module of the user's, which might keep its output, gets a new one."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40, activation="swish", n_layers=3)).eval()
    if gemm == "int8":
        quantize_int8(model)
    elif gemm is not None:
        for_decoding(model, gemm)
    in_place = []
    swish = model.decoder.layers[0].ffn.activation
    monkeypatch.setitem(
        layer_step.IN_PLACE, swish, lambda x: in_place.append(x) or torch.nn.functional.silu(x, inplace=True)
    )

    class Keeping(torch.nn.Module):  # keeps what it returns
        def __init__(self, linear):
            super().__init__()
            self.linear, self.kept = linear, []

        def forward(self, x):
            out = self.linear(x)
            self.kept.append((x.clone(), out))
            return out

    ffn = model.decoder.layers[1].ffn
    ffn.fc1 = Keeping(ffn.fc1)
    hooked, seen = model.decoder.layers[2].ffn.fc1, []  # a hook may keep the output too
    hooked.register_forward_hook(lambda module, inputs, output: seen.append((inputs[0].clone(), output)))
    src, tokens = torch.randint(4, 40, (2, 7)), torch.randint(4, 40, (2, 3))
    model_logits, lean_logits = steps_both_ways(model, src, tokens, 1)
    assert (model_logits - lean_logits).abs().max().item() <= 1e-5
    assert len(in_place) == 3 * (len(model.decoder.layers) - 2)  # every step, every layer but the user's two
    with torch.inference_mode():
        for module, kept in ((ffn.fc1.linear, ffn.fc1.kept), (hooked, seen)):
            assert kept and all(torch.equal(out, module.forward(x)) for x, out in kept)  # left as returned (no hook)
