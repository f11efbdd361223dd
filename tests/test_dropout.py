"""Training's dropout masks (aiayn.cpu.dropout): the keep rate, the scale, the gradient, and where it applies."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aiayn.config import ModelConfig
from aiayn.cpu.dropout import LANE, dropout, fast_dropout, keep_mask
from aiayn.model import Transformer


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_lane_keeps_one_minus_p(p):
    torch.manual_seed(0)
    keep, scale = keep_mask(torch.Size([400_000]), p, torch.device("cpu"))
    dropped = round(p * LANE) / LANE  # p to within 2^-16
    assert abs(dropped - p) <= 2**-16 and scale == pytest.approx(1 / (1 - dropped), rel=1e-12)
    for lane in range(4):  # the four 16-bit lanes of each 64-bit word, the top one included
        assert keep[lane::4].float().mean().item() == pytest.approx(1 - p, abs=0.006)


def test_expected_output_is_the_input_and_the_gradient_uses_the_same_mask():
    torch.manual_seed(1)
    x = torch.randn(300, 256, requires_grad=True)
    y = dropout(x, 0.3)
    kept = y != 0
    assert 0.68 < kept.float().mean().item() < 0.72
    torch.testing.assert_close(y[kept], x[kept] * (LANE / (LANE - round(0.3 * LANE))))
    grad = torch.randn_like(y)
    y.backward(grad)
    torch.testing.assert_close(x.grad, torch.where(kept, grad * (y / x.detach()), 0.0))
    assert dropout(torch.ones(1_000_000), 0.3).mean().item() == pytest.approx(1.0, abs=0.005)


def test_bf16_stays_bf16_and_seeds_repeat():
    x = torch.randn(64, 32).bfloat16()
    torch.manual_seed(5)
    a = dropout(x, 0.1)
    torch.manual_seed(5)
    assert a.dtype == torch.bfloat16 and torch.equal(a, dropout(x, 0.1))


def test_the_context_catches_the_models_dropout_in_training_only():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40, p_drop=0.3, p_attn_drop=0.2))
    src, tgt = torch.randint(4, 40, (3, 9)), torch.randint(4, 40, (3, 8))
    calls = []
    original = torch.Tensor.random_

    def counting(self, *args, **kwargs):
        calls.append(self.numel())
        return original(self, *args, **kwargs)

    torch.Tensor.random_ = counting
    try:
        with fast_dropout():
            model.train()(src, tgt)
            trained = len(calls)
            model.eval()(src, tgt)
            F.dropout(torch.ones(4), 0.0, True)
            inplace = torch.ones(1000)
            F.dropout(inplace, 0.5, True, True)  # in place: PyTorch's own, which changes its input
            assert (inplace == 0).any() and (inplace == 2).any()
            assert torch.isfinite(F.dropout(torch.ones(4), 1 - 1e-6, True)).all()  # p = 1 at 2^-15: PyTorch's own
    finally:
        torch.Tensor.random_ = original
    embeddings, sublayers = 2, 2 * 2 + 3 * 2  # tiny: 2 + 2 layers; attention weights drop inside SDPA's own kernel
    assert trained == embeddings + sublayers  # every nn.Dropout
    assert len(calls) == trained  # eval mode, p = 0, in place and p near 1 draw no words


def test_training_under_the_context_matches_a_hand_written_mask():
    # nn.Dropout under fast_dropout computes x * keep * scale with the mask keep_mask draws from the same seed
    layer = nn.Dropout(0.25).train()
    x = torch.randn(10, 12)
    torch.manual_seed(3)
    with fast_dropout():
        y = layer(x)
    torch.manual_seed(3)
    keep, scale = keep_mask(x.shape, 0.25, x.device)
    assert torch.equal(y, x * keep * scale)
