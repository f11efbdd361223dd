"""Loading's own memory: the peak above each engine's runtime while it loads opus-mt-en-de's shapes.

    .venv/bin/python benchmarks/probes/load_memory.py            # 3 rounds, a fresh process per engine and round

The same model and conversions as benchmarks/translate.py (made there once, under --work); each
engine loads its weights in a fresh process, 2 threads, and nothing is decoded, so the figure is
what loading alone costs (translate.py's memory tables add decoding on top). aiayn float32 loads as
`Translator.load` does, the backend measured first; aiayn int8 maps the file and quantises it.
Once loaded, the resident memory above the runtime is split into the process's own (anonymous)
pages and pages of files, which for these engines are their libraries' code: shared with every
process that runs the same library, and dropped by the kernel when memory is short.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the peers' workers (translate.py)
import translate as bench

ENGINES = ["ct2-float32", "ct2-int8", "aiayn-float32", "aiayn-int8"]


def worker(engine: str, work: Path) -> None:
    for module in bench.RUNTIMES[engine.split("-")[0]]:
        importlib.import_module(module)
    runtime = {field: bench.resident_mib(field) for field in ("VmRSS", "RssAnon", "RssFile")}
    if engine.startswith("ct2"):
        loaded = bench.run_ct2(work, 1, 1, [], engine.split("-")[1])  # kept: the split below is of the loaded model
    else:
        import torch

        from aiayn.cpu.backend import caches_for_translation

        torch.set_num_threads(bench.THREADS)
        caches_for_translation()  # as the translate command does, before the backends' measure
        loaded = bench.run_aiayn(work, 1, 1, [], engine == "aiayn-int8")
    print(
        json.dumps(
            {
                "above_runtime_mib": bench.resident_mib("VmHWM") - runtime["VmRSS"],
                "anon_mib": bench.resident_mib("RssAnon") - runtime["RssAnon"],
                "file_mib": bench.resident_mib("RssFile") - runtime["RssFile"],
            }
        )
    )
    del loaded


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
    results: dict[str, list[dict]] = {e: [] for e in ENGINES}
    for _ in range(args.rounds):
        for engine in ENGINES:
            done = subprocess.run(
                [sys.executable, __file__, "--worker", engine, "--work", str(args.work)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            results[engine].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| engine | loading's peak above the runtime, MiB (median; rounds) | once loaded: anonymous | files (code) |")
    print("| --- | --- | --- | --- |")
    for engine, rounds in results.items():
        peaks = [r["above_runtime_mib"] for r in rounds]
        anon, files = (statistics.median(r[key] for r in rounds) for key in ("anon_mib", "file_mib"))
        print(
            f"| {engine} | {statistics.median(peaks):,.0f} ({', '.join(f'{v:.0f}' for v in peaks)}) | {anon:,.0f} | {files:,.0f} |"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
