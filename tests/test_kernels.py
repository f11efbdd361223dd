"""Eq. (1)'s training kernel (aiayn.cpu.train_attention): the math kernel runs on a CPU, and it computes
what PyTorch's fused kernel does, in the forward and the backward pass."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from aiayn.config import ModelConfig
from aiayn.cpu import train_attention as kernels
from aiayn.model import Transformer


def test_auto_is_math_for_short_batches_on_a_cpu_and_fused_elsewhere():
    cpu = torch.device("cpu")
    assert kernels.attention_kernel("auto", cpu, 15) == "math"
    assert kernels.attention_kernel("auto", cpu, kernels.MATH_UP_TO) == "math"
    assert kernels.attention_kernel("auto", cpu, kernels.MATH_UP_TO + 1) == "fused"  # long: fused is faster
    assert kernels.attention_kernel("auto", torch.device("cuda"), 15) == "fused"
    assert kernels.attention_kernel("fused", cpu, 15) == "fused"
    assert kernels.attention_kernel("math", cpu, 1000) == "math"
    with pytest.raises(ValueError, match="train.attention: 'flash' is not one of auto, fused, math"):
        kernels.attention_kernel("flash", torch.device("cpu"))


def ops_and_grads(model, src, tgt, kernel):
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof, kernels.attention(kernel):
        logits = model(src, tgt)
    logits.square().mean().backward()
    return {e.key for e in prof.key_averages()}, logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_the_math_kernel_is_the_one_that_runs_and_computes_the_fused_kernels_function():
    config = ModelConfig.preset("tiny", vocab_size=50, p_drop=0.0)
    model = Transformer(config).train()
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 6))
    src[0, 5:] = config.pad_id  # padding: the masked path
    math_ops, math_logits, math_grads = ops_and_grads(model, src, tgt, "math")
    fused_ops, fused_logits, fused_grads = ops_and_grads(model, src, tgt, "fused")
    assert "aten::_scaled_dot_product_attention_math" in math_ops
    assert not any("flash" in op for op in math_ops)
    assert any("flash" in op for op in fused_ops)  # PyTorch's own choice on a CPU
    torch.testing.assert_close(math_logits, fused_logits, atol=1e-5, rtol=1e-5)
    for a, b in zip(math_grads, fused_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
