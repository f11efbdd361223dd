"""The fp32 train step under glibc's heap settings: step time, minor page faults and peak memory.

    .venv/bin/python benchmarks/probes/heap_settings.py [--rounds 3] [--steps 3] [--precision fp32]

glibc maps every block above its mmap threshold (at most 32 MiB by default) freshly and unmaps it when freed,
so the decoder's 32 MiB FFN activations cost their page faults again at every step (docs/studies/training-speed.md). Each
setting runs in its own fresh process (one warm-up step, then --steps timed ones: base shapes, MKL, fused
Adam, the kept logits table, as benchmarks/train_step.py runs aiayn), the settings alternating round by
round; the table gives medians per process and the per-round time ratio against glibc as it is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

SETTINGS = {  # name: environment
    "as it is": {},
    "MALLOC_MMAP_MAX_=0": {"MALLOC_MMAP_MAX_": "0"},  # no mappings: freed blocks stay in the heap
    "MALLOC_MMAP_THRESHOLD_=256MiB": {"MALLOC_MMAP_THRESHOLD_": str(256 << 20)},
}

CHILD = r"""
import resource, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import train_step as ts
from aiayn.recipe import TrainConfig
from aiayn.train.loop import make_optimizer
from aiayn.cpu.fused_loss import KeptTable
from translate import resident_mib
torch.set_num_threads(2)
torch.manual_seed(0)
bf16, steps = sys.argv[2] == "bf16", int(sys.argv[3])
model = ts.aiayn_model()
optimizer = make_optimizer(model, TrainConfig())  # §5.3's fused Adam, as training builds it (the rate set each step)
generator, kept, times, faults = torch.Generator().manual_seed(1234), KeptTable(), [], []
for step in range(steps + 1):
    batch = ts.batch(generator)
    before, began = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    ts.aiayn_step(model, optimizer, *batch, step + 1, bf16, kept=kept)
    if step:  # the first is the warm-up
        times.append(time.perf_counter() - began)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(statistics.median(times), statistics.median(faults), round(resident_mib("VmHWM")))
"""


def run(setting: str, precision: str, steps: int) -> tuple[float, float, int]:
    env = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", **SETTINGS[setting]}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).resolve().parents[1]), precision, str(steps)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{setting}: the step failed:\n{done.stderr[-2000:]}")
    seconds, faults, peak = done.stdout.split()[-3:]
    return float(seconds), float(faults), int(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process, after one warm-up")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in SETTINGS}
    for r in range(args.rounds):
        for name in SETTINGS:
            results[name].append(run(name, args.precision, args.steps))
            seconds, faults, peak = results[name][-1]
            print(f"round {r + 1} {name:32s} {seconds:6.2f} s {faults:9,.0f} faults {peak:6,} MiB", flush=True)
    base = [s for s, _, _ in results["as it is"]]
    print(
        f"\n| glibc setting ({args.precision}) | step s (median) | time / as it is, per round | minor faults a step "
        "| peak RSS MiB |\n| --- | --- | --- | --- | --- |"
    )
    for name, rows in results.items():
        ratios = ", ".join(f"{s / b:.2f}" for (s, _, _), b in zip(rows, base))
        print(
            f"| {name} | {statistics.median(s for s, _, _ in rows):.2f} | {ratios} | "
            f"{statistics.median(f for _, f, _ in rows):,.0f} | {max(p for _, _, p in rows):,} |"
        )
    print(f"\n(load average at the end: {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
