"""The copy task: a tiny Transformer learns to copy random sequences (trained in well under a minute)."""

from __future__ import annotations

from aiayn.copy_task import copy_accuracy, train_copy


def test_tiny_model_learns_to_copy():
    model = train_copy(steps=1000, length=10, n_symbols=11, seed=0)
    assert copy_accuracy(model, n=100, length=10, n_symbols=11) >= 0.99
