"""Sinusoidal positional encodings, §3.5."""

from __future__ import annotations

import math

import torch

from aiayn.model import sinusoid_table


def test_table_equals_the_formula():
    d_model = 16
    pe = sinusoid_table(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    halves = sinusoid_table(50, d_model, "halves")  # Marian's layout: all sines, then all cosines
    assert torch.equal(halves[:, : d_model // 2], pe[:, 0::2])
    assert torch.equal(halves[:, d_model // 2 :], pe[:, 1::2])


def test_largest_wavelength_at_d_model_512():
    # The wavelength of pair i is 2*pi*10000^(2i/d_model); the last pair has 2i = 510.
    largest = 2 * math.pi * 10000 ** (510 / 512)
    assert round(largest) == 60611
    # and the table's last sine column really has that period.
    pe = sinusoid_table(1, 512)
    assert pe.shape == (1, 512)
    freq = 1 / 10000 ** (510 / 512)
    assert math.isclose(2 * math.pi / freq, largest, rel_tol=1e-12)


def test_pe_of_pos_plus_k_is_a_linear_function_of_pe_of_pos():
    pe = sinusoid_table(300, 64).double()
    for k in (1, 5, 40):
        X, Y = pe[:-k], pe[k:]  # rows PE(pos) and PE(pos + k)
        M = torch.linalg.lstsq(X, Y).solution  # the fitted matrix: Y = X M
        assert (X @ M - Y).abs().max().item() < 1e-4
