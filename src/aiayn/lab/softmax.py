"""Why scaled dot-product attention divides by sqrt(d_k) (§3.2.1, footnote 4).

If q and k have independent components of mean 0 and variance 1, q.k has mean 0 and variance d_k:
large d_k pushes the softmax into regions where it is nearly one-hot and its gradient vanishes.
"""

from __future__ import annotations

import math

import numpy as np


def scaling_scores(raw_scale: float, d_k: int, matches: tuple[float, ...] = (1.0, 0.5, 0.0)) -> np.ndarray:
    """The widget's scores for keys of high, medium and low match: raw_scale * match * sqrt(d_k), (len(matches),).

    q.k of unit-variance components grows like sqrt(d_k) (its standard deviation), hence the factor.
    """
    if d_k < 1:
        raise ValueError(f"d_k must be at least 1, got {d_k}")
    return raw_scale * np.asarray(matches, dtype=np.float64) * math.sqrt(d_k)


def softmax(scores: np.ndarray) -> np.ndarray:
    """softmax over the last axis, computed stably (the largest score subtracted first)."""
    scores = np.asarray(scores, dtype=np.float64)
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def attention_weights(scores: np.ndarray, d_k: int, scaled: bool = True) -> np.ndarray:
    """softmax(scores / sqrt(d_k)) as eq. 1 does, or softmax(scores) without the scaling: same shape."""
    scores = np.asarray(scores, dtype=np.float64)
    return softmax(scores / math.sqrt(d_k) if scaled else scores)


def jacobian_norm(weights: np.ndarray) -> float:
    """Frobenius norm of the softmax Jacobian diag(p) - p p^T: how much gradient flows through it.

    It is largest for a uniform p and tends to 0 as p becomes one-hot (saturation).
    """
    p = np.asarray(weights, dtype=np.float64).reshape(-1)
    return float(np.linalg.norm(np.diag(p) - np.outer(p, p)))


def entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy in nats of each distribution along the last axis (0 for one-hot, log n for uniform)."""
    p = np.asarray(weights, dtype=np.float64)
    return -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)).sum(axis=-1)


def dot_product_variance(d_ks: list[int], samples: int = 20000, seed: int = 0) -> np.ndarray:
    """var(q.k) measured over random q, k with unit-variance components, one value per d_k: (len(d_ks),)."""
    rng = np.random.default_rng(seed)
    out = []
    for d_k in d_ks:
        q = rng.standard_normal((samples, d_k))
        k = rng.standard_normal((samples, d_k))
        out.append((q * k).sum(axis=1).var())
    return np.array(out)


def saturation(d_ks: list[int], n_keys: int = 10, samples: int = 500, seed: int = 0) -> dict[str, np.ndarray]:
    """For each d_k: the mean largest softmax weight, entropy and Jacobian norm over random q and n_keys keys.

    Returns arrays of shape (len(d_ks),) under "max_weight", "entropy", "gradient", each with suffix
    "_scaled" (softmax(q.k / sqrt(d_k)), eq. 1) and "_unscaled" (softmax(q.k)).
    """
    rng = np.random.default_rng(seed)
    result: dict[str, list[float]] = {}
    for d_k in d_ks:
        q = rng.standard_normal((samples, 1, d_k))
        k = rng.standard_normal((samples, n_keys, d_k))
        scores = (q * k).sum(axis=-1)  # (samples, n_keys)
        for name, scaled in (("scaled", True), ("unscaled", False)):
            p = attention_weights(scores, d_k, scaled)  # (samples, n_keys)
            grads = [jacobian_norm(row) for row in p]
            result.setdefault(f"max_weight_{name}", []).append(float(p.max(axis=-1).mean()))
            result.setdefault(f"entropy_{name}", []).append(float(entropy(p).mean()))
            result.setdefault(f"gradient_{name}", []).append(float(np.mean(grads)))
    return {key: np.array(values) for key, values in result.items()}
