"""Exact resume: a run killed with SIGKILL and started again ends bit-identical to a run left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiayn.data.sources import read_lines
from aiayn.data.vocab import Vocab

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"


def command(out: Path, vocab: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "aiayn",
        "train",
        "recipes/tiny.yaml",
        "--out",
        str(out),
        f"--data.vocab={vocab}",
        f"--data.train={VAL}",
        f"--data.valid={VAL}",
        "--train.max_steps=60",
        "--train.save_every=20",
        *extra,
    ]


# 60 steps are 2 epochs and more of val (about 27 batches of 512 tokens): the resumed run re-segments its epochs
@pytest.mark.parametrize(
    "extra", [(), ("--data.bpe_dropout=0.1",), ("--train.weight_decay=0.1",)], ids=["", "bpe-dropout", "weight-decay"]
)
def test_sigkill_and_restart_end_with_identical_weights(tmp_path, extra):
    vocab = tmp_path / "spm.model"  # one vocabulary for both runs
    Vocab.train(read_lines(f"{VAL}.en.gz") + read_lines(f"{VAL}.de.gz"), 300).save(vocab)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    run = subprocess.run(command(straight, vocab, *extra), cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr

    process = subprocess.Popen(
        command(killed, vocab, *extra), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first = killed / "checkpoints" / "step-20" / "state.json"
    while not first.exists() and process.poll() is None:
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before it could be killed part-way"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed / "checkpoints" / "step-60").exists()

    run = subprocess.run(command(killed, vocab, *extra), cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "resumed from" in run.stdout
    weights = "checkpoints/step-60/model.safetensors"
    assert (killed / weights).read_bytes() == (straight / weights).read_bytes()
