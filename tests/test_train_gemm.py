"""Training's products on oneDNN (aiayn.cpu.train_gemm): the same logits and gradients as MKL's, oneDNN
really runs, the choice follows its rules, and a run keeps it in its checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from aiayn.config import ModelConfig
from aiayn.cpu import backend
from aiayn.cpu import train_gemm as gemm
from aiayn.model import Transformer

pytestmark = pytest.mark.skipif(not backend.onednn_available(), reason="this PyTorch build has no oneDNN")


def step(model, src, tgt, name):
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof, gemm.products(name):
        logits = model(src, tgt)
    logits.square().mean().backward()  # outside the context, as in the training loop
    return {e.key for e in prof.key_averages()}, logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_onednn_products_compute_mkls_logits_and_gradients():
    config = ModelConfig.preset("tiny", vocab_size=50, p_drop=0.0)
    model = Transformer(config).train()
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 6))
    src[0, 5:] = config.pad_id
    mkl_ops, mkl_logits, mkl_grads = step(model, src, tgt, "mkl")
    dnn_ops, dnn_logits, dnn_grads = step(model, src, tgt, "onednn")
    assert "mkldnn::_linear_pointwise" in dnn_ops and "mkldnn::_linear_pointwise" not in mkl_ops
    torch.testing.assert_close(dnn_logits, mkl_logits, atol=1e-5, rtol=1e-5)
    assert all(g is not None for g in dnn_grads)  # tied embedding, biases, every layer
    for a, b in zip(dnn_grads, mkl_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_autocast_and_other_dtypes_are_left_to_pytorch():
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof, gemm.products("onednn"):
        torch.nn.functional.linear(x.double(), w.double())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.linear(x, w)
    assert "mkldnn::_linear_pointwise" not in {e.key for e in prof.key_averages()}


def test_the_choice_forced_kept_or_measured(monkeypatch):
    monkeypatch.delenv(backend.ENV, raising=False)
    tiny, cpu = ModelConfig.preset("tiny", vocab_size=50), torch.device("cpu")
    assert gemm.choose("onednn", tiny, cpu, None) == "onednn"
    assert gemm.choose("mkl", tiny, cpu, None, kept="onednn") == "mkl"  # the option outranks the checkpoint
    assert gemm.choose("auto", tiny, cpu, None, kept="onednn") == "onednn"  # a resume keeps its start's choice
    assert gemm.choose("auto", tiny, cpu, None) == "mkl"  # products of microseconds: nothing worth measuring
    base = ModelConfig.preset("base", vocab_size=8000)
    assert gemm.measured_flop(base) >= gemm.MIN_FLOP
    assert gemm.choose("auto", base, cpu, None) in ("mkl", "onednn")  # measured
    assert gemm.choose("onednn", tiny, cpu, torch.bfloat16) == "mkl"  # autocast multiplies on its own
    assert gemm.choose("onednn", tiny, cpu, None, compiled=True) == "mkl"  # so does the compiler
    monkeypatch.setenv(backend.ENV, "onednn")
    assert gemm.choose("auto", tiny, cpu, None, kept="mkl") == "onednn"
    monkeypatch.setenv(backend.ENV, "onednn+packed")  # decoding's packed vocabulary: training takes the layers' part
    assert gemm.choose("auto", tiny, cpu, None, kept="mkl") == "onednn"
    with pytest.raises(ValueError, match="train.gemm: 'blas' is not one of auto, mkl, onednn"):
        gemm.choose("blas", tiny, cpu, None)


def test_a_run_records_its_choice_and_a_resume_keeps_it(tmp_path, monkeypatch):
    from aiayn.recipe import load_recipe
    from aiayn.train.checkpoint import load_checkpoint
    from aiayn.train.loop import train

    monkeypatch.delenv(backend.ENV, raising=False)
    recipe, out = Path(__file__).resolve().parents[1] / "recipes" / "tiny.yaml", tmp_path / "run"
    last = lambda: load_checkpoint(max((out / "checkpoints").iterdir(), key=lambda p: int(p.name.split("-")[1])))[0]  # noqa: E731
    train(load_recipe(recipe, ["--train.max_steps=4", "--train.save_every=2", "--train.gemm=onednn"]), out)
    assert last().gemm == "onednn"
    train(load_recipe(recipe, ["--train.max_steps=6", "--train.save_every=2"]), out)  # auto
    assert last().step == 6 and last().gemm == "onednn"  # the run's own choice, not what auto gives a tiny model
