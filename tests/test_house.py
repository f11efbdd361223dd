"""The tree's own rules, checked as CI runs the tests: ruff's lint and format (settings in pyproject.toml)."""

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
