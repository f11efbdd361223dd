"""Shared fixtures: seeded tiny configurations, the real data folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# aiayn's own product (cpu/gemv.py) is built once per test session into a folder of its own, not the user's cache
os.environ["AIAYN_CACHE"] = tempfile.mkdtemp(prefix="aiayn-test-cache-")
torch.set_num_threads(2)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _kernel_caches(monkeypatch):
    """oneDNN's cache sizes in the environment as they were: the translate and serve commands set their own
    (`backend.caches_for_translation`), run here in this process, and processes the tests start inherit them."""
    from aiayn.cpu.onednn_caches import ONEDNN_CACHES, RECORD

    for name in (*ONEDNN_CACHES, RECORD):
        if name in os.environ:  # set by aiayn's import
            monkeypatch.setenv(name, os.environ[name])
        else:  # absent: recorded as absent (set, then deleted), so that a value a test sets is taken away after it
            monkeypatch.setenv(name, "")
            monkeypatch.delenv(name)


@pytest.fixture
def data_dir() -> Path:
    if not (DATA / "multi30k").is_dir():
        pytest.fail(f"the shared data folder is missing: {DATA}")
    return DATA
