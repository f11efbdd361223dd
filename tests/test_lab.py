"""The paper lab's functions against the formulas they illustrate (issue 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aiayn.lab import cost, positions, softmax


def test_scaling_scores_grow_like_sqrt_d_k():
    np.testing.assert_allclose(softmax.scaling_scores(2.0, 64), [16.0, 8.0, 0.0])
    np.testing.assert_allclose(softmax.scaling_scores(1.0, 1, matches=(0.3,)), [0.3])


def test_attention_weights_scaled_and_not():
    scores = softmax.scaling_scores(2.0, 64)  # [16, 8, 0]
    unscaled = np.exp(scores) / np.exp(scores).sum()
    scaled = np.exp(scores / 8) / np.exp(scores / 8).sum()
    np.testing.assert_allclose(softmax.attention_weights(scores, 64, scaled=False), unscaled)
    np.testing.assert_allclose(softmax.attention_weights(scores, 64), scaled)
    # The scaled scores (2, 1, 0) do not depend on d_k: the widget's point.
    np.testing.assert_allclose(softmax.attention_weights(softmax.scaling_scores(2.0, 1024), 1024), scaled)


def test_jacobian_norm_formula():
    p = np.array([0.5, 0.25, 0.25])
    jacobian = np.array([[0.25, -0.125, -0.125], [-0.125, 0.1875, -0.0625], [-0.125, -0.0625, 0.1875]])
    assert softmax.jacobian_norm(p) == pytest.approx(np.linalg.norm(jacobian))
    assert softmax.jacobian_norm(np.array([1.0, 0.0, 0.0])) == 0.0  # saturated: no gradient


def test_dot_product_variance_is_d_k():
    d_ks = [1, 16, 256, 1024]
    variance = softmax.dot_product_variance(d_ks, samples=8000)
    np.testing.assert_allclose(variance, d_ks, rtol=0.1)


def test_unscaled_softmax_saturates_and_scaled_does_not():
    stats = softmax.saturation([1, 1024], samples=200)
    assert stats["max_weight_unscaled"][1] > 0.9 and stats["gradient_unscaled"][1] < 0.1
    assert abs(stats["max_weight_scaled"][1] - stats["max_weight_scaled"][0]) < 0.1


def test_encoding_matches_the_formula_in_both_layouts():
    pe = positions.encoding(50, 16)
    pos, i = 37, 3
    angle = pos / 10000 ** (2 * i / 16)
    assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
    assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
    halves = positions.encoding(50, 16, layout="halves")
    np.testing.assert_allclose(halves[:, :8], pe[:, 0::2])
    np.testing.assert_allclose(halves[:, 8:], pe[:, 1::2])
    with pytest.raises(ValueError, match="even"):
        positions.encoding(5, 7)


def test_wavelengths_geometric_from_2pi():
    w = positions.wavelengths(512)
    assert w.shape == (256,)
    assert w[0] == pytest.approx(2 * math.pi)
    assert w[-1] == pytest.approx(2 * math.pi * 10000 ** (510 / 512))
    assert round(w[-1]) == 60611
    np.testing.assert_allclose(w[1:] / w[:-1], 10000 ** (2 / 512))


def test_shift_is_one_linear_map_for_every_position():
    for k in (1, 5, 30):
        assert positions.linearity_error(k, 64, length=200) < 1e-5


def test_table2_costs_are_time_gpus_rate():
    rows = {row.model: row for row in cost.TABLE2}
    base, big = rows["Transformer (base model)"], rows["Transformer (big)"]
    assert f"{cost.paper_flops(cost.BASE_HOURS):.1e}" == f"{base.flops_en_de:.1e}" == "3.3e+18"
    assert f"{cost.paper_flops(cost.BIG_HOURS):.1e}" == f"{big.flops_en_de:.1e}" == "2.3e+19"
    assert (big.bleu_en_de, big.bleu_en_fr) == (28.4, 41.8)
    assert all(isinstance(row, cost.Table2Row) for row in cost.TABLE2)
