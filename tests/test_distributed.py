"""torchrun + DistributedDataParallel on CPU (Gloo), resuming with another world size, mixed precision.

One uninterrupted single-process run with accumulation 2 is the reference: 2 ranks with 1 micro-batch
each must reach the same weights, and so must a 2-rank run that is killed and resumed by 1 process.
Dropout is off in these runs so that every difference comes from the data or the arithmetic.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aiayn.recipe import load_recipe
from aiayn.train import loop, precision
from aiayn.train.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
REF_STEPS = 20


def write_recipe(path: Path, data_dir: Path, **train: object) -> Path:
    """The tiny test recipe: 512-token micro-batches, 1,024 tokens a step, no dropout, a checkpoint every 2 steps."""
    # Adam's eps is 1e-4, not 1e-9: the attention key biases get a zero gradient in exact arithmetic
    # (softmax ignores a constant added to every score), and at eps 1e-9 Adam turns their rounding
    # noise, which differs between 2 ranks and 1 process, into a full step of +-lr.
    values = dict(
        batch_tokens=512,
        effective_batch_tokens=1024,
        warmup_steps=20,
        max_steps=REF_STEPS,
        adam_eps=1e-4,
        eval_every=0,
        eval_bleu=False,
        save_every=2,
        keep_checkpoints=1000,
        average_last=1,
        beam_size=1,
        log_every=1000,
        threads=1,
        device="cpu",
        **train,
    )
    val = data_dir / "multi30k" / "val"
    lines = [
        "data:",
        f"  train: {val}",
        f"  valid: {val}",
        '  test: ""',
        "  vocab_size: 300",
        "  max_subwords: 64",
        "model:",
        "  preset: tiny",
        "  max_len: 128",
        "  p_drop: 0.0",
        "train:",
    ]
    lines += [f"  {name}: {value}" for name, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(out / "checkpoints" / f"step-{step}" / "model.safetensors"))


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def seed_out_dir(ref: Path, out: Path) -> Path:
    """A fresh run folder: its vocabulary (trained the same deterministic way) is the reference's."""
    return out


def load_state(checkpoint: Path):
    return load_checkpoint(checkpoint)[0]


def kill_tree(pid: int) -> None:
    """SIGKILL pid and all its descendants (torchrun starts each rank in a session of its own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [pid], []
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    for victim in reversed(found):  # the ranks first, so that the launcher cannot react
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def torchrun(recipe: Path, out: Path, *overrides: str) -> subprocess.Popen:
    """`torchrun --standalone --nproc-per-node 2 -m aiayn train RECIPE --out OUT ...`: Gloo on CPU."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "aiayn",
        "train",
        str(recipe),
        "--out",
        str(out),
        *overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(autouse=True, scope="module")
def _restore_threads():
    """train() sets torch's thread count (1 here: 2 threads on 2 busy cores can be 20x slower)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """(recipe, run folder) of one process with accumulation 2, REF_STEPS steps, every other step saved."""
    if not (DATA / "multi30k").is_dir():
        pytest.fail(f"the shared data folder is missing: {DATA}")
    root = tmp_path_factory.mktemp("distributed")
    recipe = write_recipe(root / "tiny.yaml", DATA)
    logs: list[str] = []
    loop.train(load_recipe(recipe), root / "ref", log=logs.append)
    assert any("2 micro-batch(es) of 512 tokens per step x 1 process(es)" in line for line in logs), logs
    return recipe, root / "ref"


def test_two_gloo_ranks_equal_one_process_with_accumulation(reference, tmp_path):
    recipe, ref = reference
    out = seed_out_dir(ref, tmp_path / "ddp")
    proc = torchrun(recipe, out, "--train.max_steps=6")
    text, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, text
    assert text.count("parameters;") == 1, text  # only rank 0 logs
    assert "1 micro-batch(es) of 512 tokens per step x 2 process(es)" in text, text
    assert max_difference(weights(ref, 2), weights(ref, 6)) > 1e-3  # training moved the weights
    for step in (2, 4, 6):
        assert max_difference(weights(out, step), weights(ref, step)) < 1e-6, step
    assert load_state(out / "checkpoints" / "step-6").data == load_state(ref / "checkpoints" / "step-6").data


def test_killed_two_rank_run_resumes_with_one_process(reference, tmp_path):
    recipe, ref = reference
    out = seed_out_dir(ref, tmp_path / "killed")
    proc = torchrun(recipe, out, "--train.max_steps=100000")
    first = out / "checkpoints" / "step-4" / "state.json"
    deadline = time.monotonic() + 180
    while not first.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    kill_tree(proc.pid)  # both ranks and the launcher, mid-run, as a lost machine would
    text, _ = proc.communicate(timeout=60)
    assert first.is_file(), text
    saved = sorted(int(p.name[5:]) for p in (out / "checkpoints").glob("step-*") if (p / "state.json").is_file())
    killed_at = saved[-1]
    assert 4 <= killed_at < REF_STEPS, saved
    assert max_difference(weights(out, killed_at), weights(ref, killed_at)) < 1e-6

    logs: list[str] = []
    results = loop.train(load_recipe(recipe), out, log=logs.append)  # the same recipe, now one process
    assert any(f"resumed from {out / 'checkpoints' / f'step-{killed_at}'}" in line for line in logs), logs
    assert any("2 micro-batch(es) of 512 tokens per step x 1 process(es)" in line for line in logs), logs
    assert results["steps"] == REF_STEPS
    # The same data order: the same batches in the same steps give the same weights and data position.
    assert max_difference(weights(out, REF_STEPS), weights(ref, REF_STEPS)) < 1e-6
    end = load_state(out / "checkpoints" / f"step-{REF_STEPS}")
    assert end.data == load_state(ref / "checkpoints" / f"step-{REF_STEPS}").data


def _train_recording(recipe: Path, out: Path, monkeypatch, *overrides: str) -> tuple[set, list[float]]:
    """Train in this process; return the dtypes of the logits the training loss saw, and the loss per token."""
    dtypes, losses = set(), []
    from aiayn.cpu import training

    original = training.projected_smoothed_nll

    def recording(hidden, weight, bias, target, epsilon, pad_id, kept, *args):
        loss, nll, n = original(hidden, weight, bias, target, epsilon, pad_id, kept, *args)
        dtypes.add(kept.dtype)  # the logits table's
        losses.append(loss.item() / n)
        return loss, nll, n

    monkeypatch.setattr(training, "projected_smoothed_nll", recording)
    loop.train(
        load_recipe(recipe, ["--train.adam_eps=1e-9", "--train.effective_batch_tokens=0", *overrides]),
        out,
        log=lambda _: None,
    )
    return dtypes, losses


def test_bf16_autocast_on_cpu_lowers_the_loss(reference, tmp_path, monkeypatch):
    recipe, ref = reference
    out = seed_out_dir(ref, tmp_path / "bf16")
    dtypes, losses = _train_recording(
        recipe, out, monkeypatch, "--train.bf16=true", "--train.max_steps=30", "--model.p_drop=0.1"
    )
    assert dtypes == {torch.bfloat16}
    assert len(losses) == 30
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, losses


def test_fp16_with_a_gradient_scaler_trains_and_saves_the_scaler(reference, tmp_path, monkeypatch):
    recipe, ref = reference
    out = seed_out_dir(ref, tmp_path / "fp16")
    # fp16 matrix products are slow on a CPU: 15 steps, with a shorter warm-up
    dtypes, losses = _train_recording(
        recipe,
        out,
        monkeypatch,
        "--train.fp16=true",
        "--train.max_steps=15",
        "--train.warmup_steps=8",
        "--train.save_every=15",
    )
    assert dtypes == {torch.float16}
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.3, losses
    scaler = load_state(out / "checkpoints" / "step-15").scaler  # saved for an exact resume
    assert scaler["scale"] == 2.0**16 and scaler["_growth_tracker"] == 15  # active, and no step overflowed


def test_bf16_auto_follows_the_hardware(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert precision.autocast_dtype("auto", False, cpu) is torch.bfloat16
    assert precision.autocast_dtype("auto", True, cpu) is torch.float16  # fp16 by name wins over the guess
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert precision.autocast_dtype("auto", False, cpu) is None  # emulated bf16 is slower than fp32
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert precision.autocast_dtype("auto", False, cpu) is torch.bfloat16


def test_precision_flags():
    assert precision.autocast_dtype(False, False) is None
    assert precision.autocast_dtype(True, False) is torch.bfloat16
    assert precision.autocast_dtype(False, True) is torch.float16
    with pytest.raises(ValueError, match="choose one"):
        precision.autocast_dtype(True, True)
    assert not precision.grad_scaler(torch.device("cpu"), torch.bfloat16).is_enabled()
    assert precision.grad_scaler(torch.device("cpu"), torch.float16).is_enabled()


def test_two_ranks_resumed_with_dropout_equal_a_straight_two_rank_run(reference, tmp_path):
    """Issue 17, 2: each rank's RNG state is saved and each rank gets its own back, so dropout matches."""
    recipe, _ = reference
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for out in (straight, resumed):
        if out == resumed:  # the straight run's folder as it stood at step 2
            shutil.copytree(straight, resumed, ignore=shutil.ignore_patterns(".aiayn.lock"))
            shutil.rmtree(resumed / "checkpoints" / "step-4")
        proc = torchrun(recipe, out, "--model.p_drop=0.1", "--train.max_steps=4")
        text, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, text
    assert "resumed from" in text and "step-2" in text
    state = load_state(resumed / "checkpoints" / "step-2")
    assert len(state.rng) == 2 and not torch.equal(state.rng[0]["torch"], state.rng[1]["torch"])
    a, b = weights(straight, 4), weights(resumed, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_two_ranks_plan_one_cool_down_under_a_time_budget(reference, tmp_path):
    """train.cooldown under torchrun: each rank reads its own clock, yet all plan at one step, with one plan."""
    recipe, _ = reference
    out = tmp_path / "cool"
    proc = torchrun(
        recipe,
        out,
        "--train.max_steps=100000",
        "--train.max_minutes=0.15",
        "--train.cooldown=0.5",
        "--train.save_every=5",
    )
    text, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, text
    assert text.count("the time budget holds about") == 1, text  # planned once (rank 0 logs)
    last = max(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*"))
    state = load_state(out / "checkpoints" / f"step-{last}")
    assert state.planned_steps > 10 and state.planned_minutes == 0.15


SHARES = r"""
import json, sys
from pathlib import Path
import torch
from aiayn.data.batching import BatchStream, rank_share
from aiayn.data.vocab import Vocab
from aiayn.recipe import load_recipe
from aiayn.train import distributed
from aiayn.train.loop import load_split

recipe, out, vocab = load_recipe(sys.argv[1]), Path(sys.argv[2]), Vocab.load(sys.argv[3])
_, joined = distributed.init(torch.device("cpu"))
store = load_split(recipe, recipe.data.train, vocab, len(vocab), out / "train", print, "data.train")  # rank 0 builds it
stream = BatchStream(store.src.lengths(), store.tgt.lengths(), recipe.train.batch_tokens, recipe.train.seed)
rank, world, mine = distributed.rank(), distributed.world_size(), []
while stream.epoch == 1:
    step = stream.step(2 * world)  # accumulation 2
    mine += [int(i) for rows, epoch in rank_share(step, rank, world) if epoch == 1 for i in rows]
(out / f"rank{rank}.json").write_text(json.dumps({"pairs": mine, "stored": len(store)}))
distributed.close(joined)
"""


def test_each_rank_reads_its_own_batches_from_one_store_and_together_every_pair_once(tmp_path):
    from aiayn.data.sources import read_lines
    from aiayn.data.vocab import Vocab

    recipe = write_recipe(tmp_path / "tiny.yaml", DATA)
    val = DATA / "multi30k" / "val"
    Vocab.train(read_lines(f"{val}.en.gz") + read_lines(f"{val}.de.gz"), 300).save(tmp_path / "spm.model")
    script = tmp_path / "shares.py"
    script.write_text(SHARES)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, str(recipe), str(tmp_path), str(tmp_path / "spm.model")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("kept ") == 1, done.stdout  # one rank prepared the store
    shares = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    first, second = set(shares[0]["pairs"]), set(shares[1]["pairs"])
    assert first and second and not first & second  # different batches, no pair on both ranks
    assert sorted(shares[0]["pairs"] + shares[1]["pairs"]) == list(range(shares[0]["stored"]))  # each pair once
