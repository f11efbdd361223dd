"""Memory as the products' shapes change: oneDNN's kernel caches as aiayn bounds them and as PyTorch leaves them.

    .venv/bin/python benchmarks/probes/shape_memory.py                   # every job, each cache size in a fresh process (about 10 minutes)
    .venv/bin/python benchmarks/probes/shape_memory.py --jobs own-lengths  # batches whose sentences end at their own lengths

oneDNN compiles a kernel for each product shape and keeps it, with its buffers, in two caches
(oneDNN's own and PyTorch's ideep). PyTorch leaves each at 1,024 entries; importing aiayn.cpu sets both
to `aiayn.cpu.onednn_caches.ONEDNN_CACHE_ENTRIES` (64) unless the environment already sets them (src/aiayn/cpu/onednn_caches.py). Resident memory growth
(VmRSS, MiB) after each stage of two jobs:

- translate: benchmarks/translate.py's model (opus-mt-en-de's shapes, its --work folder), float32,
  greedy, 3 output tokens a sentence: one sentence of each source length 1-128 at batch 1, then
  one batch of each size 2-32 (random lengths 5-60); on oneDNN with both cache sizes, and on MKL
  (which has no such cache) for reference.
- train: the Multi30k recipe's model (the small preset, 8,000 pieces) in bf16 autocast, as the
  recipe trains on a CPU with AVX512-BF16 or AMX: 120 steps of about 3,600 target tokens whose shape
  changes every step (sentence lengths 10-40), forward, label-smoothed loss, backward and Adam;
  its seconds too, so that a bounded cache is seen to cost no speed.
- own-lengths: benchmarks/translate.py's model and first 128 sentences loaded as its workers load them (the backend
  measured), greedy and beam 4 at batch 32 with each sentence's own limit (its length + 50; the random weights
  end none earlier), so that a batch's row count falls step by step as sentences end; with aiayn's 64 entries and
  with the translate command's 16 (`cpu.backend.caches_for_translation`): the peak and the resident memory at
  the end above the process's start (loading included), and the seconds of the batches.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the peers' workers (translate.py)
import translate as bench

RUNS = [  # (job, backend, caches: "aiayn" = as importing aiayn sets them, "pytorch" = PyTorch's 1,024,
    # "translate" = as the translate command sets them)
    ("translate", "onednn", "pytorch"),
    ("translate", "onednn", "aiayn"),
    ("translate", "mkl", "aiayn"),
    ("train", "bf16", "pytorch"),
    ("train", "bf16", "aiayn"),
    ("own-lengths", "greedy", "aiayn"),
    ("own-lengths", "greedy", "translate"),
    ("own-lengths", "beam4", "aiayn"),
    ("own-lengths", "beam4", "translate"),
]
JOBS = list(dict.fromkeys(job for job, _, _ in RUNS))


def translate_job(work: Path, gemm: str) -> list[tuple[str, float]]:
    import torch

    from aiayn import cpu
    from aiayn.config import DecodeConfig
    from aiayn.cpu.layout import for_decoding
    from aiayn.decode.greedy import greedy_hypotheses
    from aiayn.marian.load import load_marian_model
    from aiayn.weights import read_column_major, read_safetensors

    model = load_marian_model(
        work / "marian", unk_id=bench.UNK, read=read_safetensors if gemm == "onednn" else read_column_major
    )
    for_decoding(model, gemm)
    step = cpu.step_model(model)  # as Translator decodes: the CPU's step, with its heap trimming
    config = DecodeConfig(beam_size=1, max_len=3, extra_len=3)
    rng, stages = random.Random(0), []
    start = bench.resident_mib("VmRSS")
    with torch.inference_mode():
        for length in range(1, 129):
            greedy_hypotheses(step, torch.randint(2, bench.PAD, (1, length)), config)
        stages.append(("batch 1, lengths 1-128", bench.resident_mib("VmRSS") - start))
        for size in range(2, 33):
            greedy_hypotheses(step, torch.randint(2, bench.PAD, (size, rng.randint(5, 60))), config)
        stages.append(("then batches of 2-32", bench.resident_mib("VmRSS") - start))
    return stages


def own_lengths_job(work: Path, search: str, sentences: int = 128) -> list[tuple[str, float]]:
    import json

    from aiayn.config import DecodeConfig
    from aiayn.cpu.step import CpuStep
    from aiayn.decode.beam import beam_search
    from aiayn.decode.greedy import greedy_hypotheses

    beam = 4 if search == "beam4" else 1
    start = bench.resident_mib("VmRSS")
    sources = json.loads((work / "sources.json").read_text())[:sentences]
    step = CpuStep(bench.run_aiayn(work, beam, 32, sources, False).model)
    config = DecodeConfig(beam_size=beam, alpha=1.0, length_penalty="power", extra_len=50)
    run = beam_search if beam > 1 else greedy_hypotheses
    run(step, bench.padded([s[:8] + [bench.EOS] for s in sources[:4]]), config)  # warm-up, as translate.py's
    began = time.perf_counter()
    for batch in bench.batches(sources, 32):
        run(step, bench.padded(batch), config)
    seconds = time.perf_counter() - began
    return [
        ("peak", bench.resident_mib("VmHWM") - start),
        ("at the end", bench.resident_mib("VmRSS") - start),
        ("seconds", seconds),
    ]


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
    parser.add_argument("--jobs", nargs="+", default=JOBS, choices=JOBS)
    parser.add_argument("--worker", nargs=3, metavar=("JOB", "BACKEND", "CACHES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import torch

        from aiayn.cpu.backend import caches_for_translation  # importing aiayn sizes the caches (cpu/onednn_caches.py)

        torch.set_num_threads(bench.THREADS)
        job, backend, caches = args.worker
        if caches == "translate":
            caches_for_translation()
        if job == "translate":
            stages = translate_job(args.work, backend)
        else:
            stages = own_lengths_job(args.work, backend) if job == "own-lengths" else train_job()
        print("; ".join(f"{name}: {value:,.{2 if name == 'seconds' else 0}f}" for name, value in stages))
        return
    bench.prepare(args.work)
    from aiayn.cpu.backend import TRANSLATION_CACHE_ENTRIES
    from aiayn.cpu.onednn_caches import (
        ONEDNN_CACHE_ENTRIES,
        ONEDNN_CACHES,
    )  # 64: what the workers get (without the variables)

    print(
        "| job | products / search | caches | growth (MiB) after each stage; own-lengths: above the start |\n| --- | --- | --- | --- |"
    )
    for job, backend, caches in RUNS:
        if job not in args.jobs:
            continue
        env = {k: v for k, v in os.environ.items() if k not in ONEDNN_CACHES}
        env["OMP_NUM_THREADS"] = str(bench.THREADS)
        if caches == "pytorch":
            env.update({name: "1024" for name in ONEDNN_CACHES})
        done = subprocess.run(
            [sys.executable, __file__, "--worker", job, backend, caches, "--work", str(args.work)],
            capture_output=True,
            text=True,
            env=env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{job} {backend} {caches} failed:\n{done.stderr[-3000:]}")
        label = {
            "pytorch": "1,024 (PyTorch's)",
            "translate": f"{TRANSLATION_CACHE_ENTRIES} (the translate command's)",
            "aiayn": "-" if backend == "mkl" else f"{ONEDNN_CACHE_ENTRIES} (aiayn's)",
        }[caches]
        print(f"| {job} | {backend} | {label} | {done.stdout.strip().splitlines()[-1]} |", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
