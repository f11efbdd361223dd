"""Memory as the products' shapes change: oneDNN's kernel caches as aiayn bounds them and as PyTorch leaves them.

    .venv/bin/python benchmarks/shape_memory.py       # both jobs, each cache size in a fresh process (about 8 minutes)

oneDNN compiles a kernel for each product shape and keeps it, with its buffers, in two caches
(oneDNN's own and PyTorch's ideep). PyTorch leaves each at 1,024 entries; importing aiayn sets both
to `aiayn.ONEDNN_CACHE_ENTRIES` (64) unless the environment already sets them (src/aiayn/onednn_caches.py). Resident memory growth
(VmRSS, MiB) after each stage of two jobs:

- translate: benchmarks/translate.py's model (opus-mt-en-de's shapes, its --work folder), float32,
  greedy, 3 output tokens a sentence: one sentence of each source length 1-128 at batch 1, then
  one batch of each size 2-32 (random lengths 5-60); on oneDNN with both cache sizes, and on MKL
  (which has no such cache) for reference.
- train: the Multi30k recipe's model (the small preset, 8,000 pieces) in bf16 autocast, as the
  recipe trains on a CPU with AVX512-BF16 or AMX: 120 steps of about 3,600 target tokens whose shape
  changes every step (sentence lengths 10-40), forward, label-smoothed loss, backward and Adam;
  its seconds too, so that a bounded cache is seen to cost no speed.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import translate as bench

CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
RUNS = [  # (job, backend, caches: "aiayn" = as importing aiayn sets them, "pytorch" = PyTorch's 1,024)
    ("translate", "onednn", "pytorch"), ("translate", "onednn", "aiayn"), ("translate", "mkl", "aiayn"),
    ("train", "bf16", "pytorch"), ("train", "bf16", "aiayn"),
]


def translate_job(work: Path, gemm: str) -> list[tuple[str, float]]:
    import torch

    from aiayn.config import DecodeConfig
    from aiayn.decode.greedy import greedy_hypotheses
    from aiayn.decode.layout import for_decoding
    from aiayn.io import read_column_major, read_safetensors
    from aiayn.marian.load import load_marian_model

    model = load_marian_model(work / "marian", unk_id=bench.UNK, read=read_safetensors if gemm == "onednn" else read_column_major)
    for_decoding(model, gemm)
    config = DecodeConfig(beam_size=1, max_len=3, extra_len=3)
    rng, stages = random.Random(0), []
    start = bench.resident_mib("VmRSS")
    with torch.inference_mode():
        for length in range(1, 129):
            greedy_hypotheses(model, torch.randint(2, bench.PAD, (1, length)), config)
        stages.append(("batch 1, lengths 1-128", bench.resident_mib("VmRSS") - start))
        for size in range(2, 33):
            greedy_hypotheses(model, torch.randint(2, bench.PAD, (size, rng.randint(5, 60))), config)
        stages.append(("then batches of 2-32", bench.resident_mib("VmRSS") - start))
    return stages


def train_job(steps: int = 120) -> list[tuple[str, float]]:
    import torch

    from aiayn import ModelConfig, Transformer
    from aiayn.train.loss import label_smoothed_nll

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("small", vocab_size=8000))
    adam = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    rng, stages, start, began = random.Random(0), [], 0.0, 0.0
    for step in range(1, steps + 1):
        length = rng.randint(10, 40)
        src = torch.randint(4, 8000, (3600 // length, length))
        tgt = torch.randint(4, 8000, (3600 // length, length + rng.randint(-3, 3)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt[:, :-1])
        loss, _, _ = label_smoothed_nll(logits, tgt[:, 1:], 0.1, 0)
        loss.backward()
        adam.step()
        adam.zero_grad()
        if step == 5:  # the first steps' one-time costs are not the growth
            start, began = bench.resident_mib("VmRSS"), time.perf_counter()
        if step % 40 == 0:
            stages.append((f"step {step}", bench.resident_mib("VmRSS") - start))
    stages.append(("seconds for steps 6-120", time.perf_counter() - began))
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "aiayn-translate-bench")
    parser.add_argument("--worker", nargs=2, metavar=("JOB", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import torch

        import aiayn  # noqa: F401  (sets the caches unless the environment has)

        torch.set_num_threads(bench.THREADS)
        job, backend = args.worker
        stages = translate_job(args.work, backend) if job == "translate" else train_job()
        print("; ".join(f"{name}: {value:,.0f}" for name, value in stages))
        return
    bench.prepare(args.work)
    from aiayn import ONEDNN_CACHE_ENTRIES  # the size its workers get (their environment drops the variables)

    print("| job | products | caches | growth (MiB) after each stage |\n| --- | --- | --- | --- |")
    for job, backend, caches in RUNS:
        env = {k: v for k, v in os.environ.items() if k not in CACHES}
        env["OMP_NUM_THREADS"] = str(bench.THREADS)
        if caches == "pytorch":
            env.update({name: "1024" for name in CACHES})
        done = subprocess.run([sys.executable, __file__, "--worker", job, backend, "--work", str(args.work)],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{job} {backend} {caches} failed:\n{done.stderr[-3000:]}")
        label = "1,024 (PyTorch's)" if caches == "pytorch" else "-" if backend == "mkl" else f"{ONEDNN_CACHE_ENTRIES} (aiayn's)"
        print(f"| {job} | {backend} | {label} | {done.stdout.strip().splitlines()[-1]} |", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
