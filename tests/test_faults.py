"""Fault injection (issue 12): the tiny recipe killed at every named fault point, then run again.

One chain of runs of the same `aiayn train` command: run k is killed (SIGKILL) at point k, and is
itself the rerun that recovers from the kill at point k - 1; the last run, with no fault, must end
with the weights of an uninterrupted run bit for bit. The runs are children of a fork server that
has imported torch once (a fresh interpreter per run would take seconds of imports each).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pytest

from aiayn import faults
from aiayn.cli import main

REPO = Path(__file__).resolve().parents[1]
VAL = REPO.parent / "shared" / "data" / "multi30k" / "val"
PRELOAD = [
    "aiayn.cli",
    "aiayn.cli.train",
    "aiayn.train.loop",
    "torch.utils.tensorboard",
    "torch._dynamo",
]  # Adam imports dynamo


def run_command(argv: list[str], env: dict[str, str], log: str) -> None:
    """`aiayn ARGV` with AIAYN_FAULT* set from env, its output to the file log: a test child's body."""
    for name in ("AIAYN_FAULT", "AIAYN_FAULT_SIGNAL"):
        os.environ.pop(name, None)
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.exit(main(argv))


def command(out: Path, *extra: str) -> list[str]:
    """6 steps, a checkpoint every 2 (the oldest pruned at step 6), the last 2 averaged; dropout on (tiny: 0.1)."""
    return [
        "train",
        str(REPO / "recipes" / "tiny.yaml"),
        "--out",
        str(out),
        f"--data.train={VAL}",
        f"--data.valid={VAL}",
        "--train.max_steps=6",
        "--train.save_every=2",
        "--train.keep_checkpoints=2",
        "--train.average_last=2",
        *extra,
    ]


@pytest.fixture(scope="module")
def server():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def run(context, argv: list[str], fault: str | None, log: Path, **env: str) -> tuple[int, str]:
    env = {"AIAYN_FAULT": fault, **env} if fault else env
    child = context.Process(target=run_command, args=(argv, env, str(log)))
    child.start()
    child.join(timeout=120)
    assert child.exitcode is not None, f"{fault}: still running after 120 s"
    return child.exitcode, log.read_text(errors="replace")


def final_weights(out: Path) -> bytes:
    return (out / "model" / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def straight(server, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faults") / "straight"
    code, text = run(server, command(out), None, out.parent / "straight.log")
    assert code == 0, text
    return out


def test_every_fault_point_is_hit_and_every_rerun_recovers_exactly(server, straight, tmp_path):
    out = tmp_path / "killed"
    assert len(faults.POINTS) >= 20
    for number, point in enumerate(faults.POINTS):
        code, text = run(server, command(out), point, tmp_path / f"{number}.log")
        assert code == -signal.SIGKILL and f"aiayn fault: {point}\n" in text, f"{point} was not hit:\n{text[-2000:]}"
    code, text = run(server, command(out), None, tmp_path / "last.log")
    assert code == 0, text
    assert "resumed from" in text
    assert final_weights(out) == final_weights(straight)
    for step in (4, 6):
        name = f"checkpoints/step-{step}/model.safetensors"
        assert (out / name).read_bytes() == (straight / name).read_bytes(), name
    assert not (out / "checkpoints" / "step-2").exists()  # pruned, as in the straight run
    assert not list(out.rglob("*.tmp")) and not list((out / "checkpoints").glob(".*"))


def test_ctrl_c_mid_step_saves_that_step_and_resumes_exactly_with_dropout(server, straight, tmp_path):
    """Issue 17, 1: SIGINT arrives between backward and the optimizer step of step 3."""
    out = tmp_path / "interrupted"
    argv, context = command(out), server
    code, text = run(context, argv, "train.after-backward@3", tmp_path / "int.log", AIAYN_FAULT_SIGNAL="INT")
    assert code == 0 and "aiayn fault: train.after-backward" in text, text
    saved = sorted(p.name for p in (out / "checkpoints").glob("step-*"))
    assert saved == ["step-2", "step-3"], saved  # the step under way was finished and saved
    code, text = run(context, argv, None, tmp_path / "resume.log")
    assert code == 0 and "resumed from" in text and "step-3" in text, text
    assert final_weights(out) == final_weights(straight)
