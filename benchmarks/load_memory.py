"""Loading's own memory: the peak above each engine's runtime while it loads opus-mt-en-de's shapes.

    .venv/bin/python benchmarks/load_memory.py            # 3 rounds, a fresh process per engine and round

The same model and conversions as benchmarks/translate.py (made there once, under --work); each
engine loads its weights in a fresh process, 2 threads, and nothing is decoded, so the figure is
what loading alone costs (translate.py's memory tables add decoding on top). aiayn float32 loads as
`Translator.load` does, the backend measured first; aiayn int8 maps the file and quantises it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import translate as bench

ENGINES = ["ct2-float32", "ct2-int8", "aiayn-float32", "aiayn-int8"]


def worker(engine: str, work: Path) -> None:
    for module in bench.RUNTIMES[engine.split("-")[0]]:
        importlib.import_module(module)
    runtime = bench.resident_mib("VmRSS")
    if engine.startswith("ct2"):
        bench.run_ct2(work, 1, 1, [], engine.split("-")[1])
    else:
        import torch

        torch.set_num_threads(bench.THREADS)
        bench.run_aiayn(work, 1, 1, [], engine == "aiayn-int8")
    print(json.dumps({"above_runtime_mib": bench.resident_mib("VmHWM") - runtime, "runtime_mib": runtime}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "aiayn-translate-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.work)
    bench.prepare(args.work)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(bench.THREADS)}
    peaks: dict[str, list[float]] = {e: [] for e in ENGINES}
    for _ in range(args.rounds):
        for engine in ENGINES:
            done = subprocess.run([sys.executable, __file__, "--worker", engine, "--work", str(args.work)],
                                  capture_output=True, text=True, env=env, check=True)
            peaks[engine].append(json.loads(done.stdout.strip().splitlines()[-1])["above_runtime_mib"])
    print("| engine | loading's peak above the runtime, MiB (median; rounds) |\n| --- | --- |")
    for engine, values in peaks.items():
        print(f"| {engine} | {statistics.median(values):,.0f} ({', '.join(f'{v:.0f}' for v in values)}) |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
