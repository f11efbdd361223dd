"""Sinusoidal positional encodings (§3.5): the table, its wavelengths, and PE(pos+k) as a linear map of PE(pos)."""

from __future__ import annotations

import numpy as np

from ..model.embedding import sinusoid_table


def encoding(length: int, d_model: int, layout: str = "interleaved") -> np.ndarray:
    """PE for positions 0 .. length-1: (length, d_model), float64. "halves" is Marian's layout."""
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be even and at least 2, got {d_model}")
    return sinusoid_table(length, d_model, layout).double().numpy()


def wavelengths(d_model: int) -> np.ndarray:
    """The wavelength of each sin/cos pair i: 2*pi*10000^(2i/d_model), from 2*pi toward 10000*2*pi: (d_model/2,)."""
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    return 2 * np.pi * 10000 ** (two_i / d_model)


def shift_matrix(k: int, d_model: int) -> np.ndarray:
    """M_k with PE(pos+k) = M_k PE(pos) for every pos (interleaved layout): (d_model, d_model).

    Each pair (sin, cos) of frequency w is rotated by the angle k*w, which does not depend on pos.
    """
    omega = 2 * np.pi / wavelengths(d_model)  # (D/2,)
    m = np.zeros((d_model, d_model))
    for i, w in enumerate(omega):
        c, s = np.cos(k * w), np.sin(k * w)
        # sin(a+b) = sin a cos b + cos a sin b; cos(a+b) = cos a cos b - sin a sin b
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return m


def linearity_error(k: int, d_model: int, length: int = 100) -> float:
    """The largest |M_k PE(pos) - PE(pos+k)| over pos = 0 .. length-1, one M_k for all of them."""
    pe = encoding(length + k, d_model)  # (length + k, D)
    predicted = pe[:length] @ shift_matrix(k, d_model).T  # (length, D)
    return float(np.abs(predicted - pe[k:]).max())
