"""Where training's resident memory goes: glibc's heap, in use and free, as the Multi30k recipe trains.

    .venv/bin/python benchmarks/probes/train_heap.py                 # 200 steps per setting, about 8 minutes
    .venv/bin/python benchmarks/probes/train_heap.py --steps 100 --thresholds unset 1048576

Each setting of MALLOC_MMAP_THRESHOLD_ trains recipes/multi30k-en-de.yaml from scratch in a fresh
process (2 threads, a folder under --work). "unset" is glibc's own rule: blocks of 128 KiB or more
are mapped on their own until one such block is freed, after which the threshold rises to that
block's size (up to 32 MiB) and blocks below it stay in the heap when freed. A fixed value turns that
rise off. A thread samples the process every 10 s: VmRSS, and glibc's mallinfo2 (heap size, bytes in
use, bytes free in the heap, bytes in mapped blocks). The table gives the peak resident memory,
the heap once training ends and the training tokens a second; the host's float32 GEMM rates come first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the peers' workers (translate.py)
from translate import resident_mib

ROOT = Path(__file__).resolve().parent.parent


class Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def child(out: str, steps: int) -> None:
    """Train the recipe for `steps` steps in this process, sampling its memory; print a JSON summary."""
    from aiayn.recipe import load_recipe
    from aiayn.train import loop

    loop.finish = (
        lambda *args, **kwargs: {}
    )  # training only: no averaging and no test set, whose decoding has its own peak

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2

    def heap() -> dict[str, int]:
        """glibc's heap now, MiB: its size, the bytes in use and free in it, and the blocks mapped on their own."""
        m = libc.mallinfo2()
        return dict(heap=m.arena >> 20, in_use=m.uordblks >> 20, free=m.fordblks >> 20, mapped=m.hblkhd >> 20)

    def sample():
        while True:
            print(f"  rss {resident_mib('VmRSS'):.0f} MiB, {heap()}", file=sys.stderr, flush=True)
            time.sleep(10)

    recipe = load_recipe(
        str(ROOT / "recipes/multi30k-en-de.yaml"),
        [f"train.max_steps={steps}", "train.threads=2", "train.eval_every=0", "train.save_every=0"],
    )
    threading.Thread(target=sample, daemon=True).start()
    results = loop.train(recipe, out, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(dict(peak=round(resident_mib("VmHWM")), tokens_per_s=results["tokens_per_s"], **heap())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--thresholds",
        nargs="+",
        default=["unset", "1048576", "8388608"],
        help="MALLOC_MMAP_THRESHOLD_ values in bytes, or unset",
    )
    parser.add_argument("--work", default=None, help="where the runs' folders go (default: a temporary folder)")
    parser.add_argument("--child", nargs=2, metavar=("OUT", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]))
    from gemm import print_host_rates  # the host's own limits come first (issue 18); the recipe trains in bf16 where

    print_host_rates()  # the CPU has it, which these float32 rates do not measure
    work = Path(args.work or tempfile.mkdtemp(prefix="aiayn-train-heap-"))
    rows = []
    for value in args.thresholds:
        env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
        if value != "unset":
            env["MALLOC_MMAP_THRESHOLD_"] = value
        print(f"MALLOC_MMAP_THRESHOLD_={value}: {args.steps} steps", flush=True)
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(work / f"run-{value}"), str(args.steps)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        rows.append((value, json.loads(done.stdout.strip().splitlines()[-1])))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; runs in {work}\n")
    print(
        "| MALLOC_MMAP_THRESHOLD_ | peak RSS MiB | heap at the end: size / in use / free MiB | mapped blocks MiB | tokens/s |"
    )
    print("| --- | --- | --- | --- | --- |")
    for value, r in rows:
        print(
            f"| {value} | {r['peak']:,} | {r['heap']:,} / {r['in_use']:,} / {r['free']:,} | {r['mapped']:,} | "
            f"{r['tokens_per_s']:,.0f} |"
        )


if __name__ == "__main__":
    main()
