"""The tree's own rules, checked as CI runs the tests: ruff's lint and format, and the import contracts
(settings in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TREES = ["src", "tests", "benchmarks"]


def ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: pip install -r requirements-cpu.txt")
    return [found]


def test_ruff_lint_passes():
    done = subprocess.run([*ruff(), "check", "--no-cache", *TREES], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_leaves_the_tree_as_it_is():
    done = subprocess.run(
        [*ruff(), "format", "--check", "--no-cache", *TREES], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_importing_aiayn_sets_no_machinery():
    """`import aiayn` loads the paper's model and configs only: no CPU machinery, no oneDNN cache sizes in the
    environment (those come with aiayn.cpu, which decoding and training import)."""
    code = (
        "import os, sys, aiayn\n"
        "print(sorted(m for m in sys.modules if m.startswith('aiayn.cpu')), 'ONEDNN_PRIMITIVE_CACHE_CAPACITY' in os.environ)"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "False"]


def test_import_contracts_hold():
    """pyproject.toml's import-linter contracts: the layers, the search apart from the CPU's machinery, the model
    apart from everything but its configuration."""
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if found is None:
        pytest.fail("import-linter is not installed: pip install -r requirements-cpu.txt")
    done = subprocess.run([found, "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
