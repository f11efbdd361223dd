"""How much of its library's code an engine pages in to decode: the part of the resident memory that is not its data.

    .venv/bin/python benchmarks/probes/code_pages.py                        # greedy, batch 1, both engines, float32
    .venv/bin/python benchmarks/probes/code_pages.py --job greedy-b32 --ops # and each PyTorch operation alone

`benchmarks/translate.py` counts, in its peaks, the pages of each engine's library code that decoding
touches (its "files" column): 23-26 MiB, most of it libtorch_cpu.so, for aiayn against 5-7 MiB of libctranslate2
for CTranslate2. This measures what decoding itself touches, once warm. In a fresh process per engine
(translate.py's model and sources, 2 threads), the model loads and translates a few sentences; then the
library's executable mapping is dropped from the process's page tables (madvise MADV_DONTNEED: clean pages
of the file, which the next call maps again from the page cache; a mapping with copy-on-write pages of its
own is left alone) and a stage runs, and /proc/self/smaps says how much came back:

- "the whole job": the job's batches, as translate.py times them (code that runs once, such as oneDNN
  compiling a kernel for a new shape, included);
- "the whole job again, warm": the same batches, dropped again first: only code that every pass runs;
- "of that, the pages the job runs": the same batches a third time, with every page's accessed bit cleared
  first (/proc/self/clear_refs; the mapped pages stay mapped), then smaps' Referenced. The kernel maps code in
  blocks around each page a call faults in (its fault-around, 64 KiB by default), so the warm pass's figure
  counts the pages next to the ones decoding runs, and this one the pages it runs;
- aiayn only, "the encoder alone": `CpuStep.start` for each batch (the encoder, the encoder-decoder
  attention's keys and values, the empty caches);
- aiayn only, "the steps and search alone": dropped again as each batch's `start` returns, so the figure is
  what the last batch's decoder steps and search paged in on their own;
- with --ops, each PyTorch operation decoding calls, alone on small tensors, after a drop: each figure
  includes the dispatcher code every operation runs, which the last row counts once for all of them.

Nothing here is timed; the figures do not depend on the load or the host's GEMM rates.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the peers' workers (translate.py)
import translate as bench

LIBRARIES = {"aiayn": "libtorch_cpu.so", "ct2": "libctranslate2"}  # the part of the file's name to look for
MADV_DONTNEED = 4


def code_mappings(library: str) -> list[tuple[int, int, float, float]]:
    """(start, end, resident MiB, referenced MiB) of each executable mapping of library whose pages are all the
    file's. Read here, not with `aiayn.cpu.memory.mappings`: CTranslate2's worker runs without torch, which importing aiayn
    would load."""
    found, current = [], None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split(maxsplit=5)  # the path, the sixth field, may hold spaces
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
            current = None
            if len(fields) >= 6 and library in Path(fields[5].strip()).name and "x" in fields[1]:
                start, end = (int(a, 16) for a in fields[0].split("-"))
                current = [start, end, 0.0, 0.0, 0]
                found.append(current)
        elif current is not None and fields[0] in ("Rss:", "Referenced:"):
            current[2 if fields[0] == "Rss:" else 3] = int(fields[1]) / 1024
        elif current is not None and fields[0] == "Anonymous:":
            current[4] = int(fields[1])
    return [(start, end, rss, referenced) for start, end, rss, referenced, anonymous in found if anonymous == 0]


def resident_code(library: str) -> float:
    return sum(rss for _, _, rss, _ in code_mappings(library))


def referenced_code(library: str) -> float:
    """MiB of library's code pages touched since `/proc/self/clear_refs` was last written (their accessed bits)."""
    return sum(referenced for *_, referenced in code_mappings(library))


def drop(library: str) -> None:
    """Take library's code out of this process's page tables; the next call into it maps it back page by page."""
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, end, *_ in code_mappings(library):
        if madvise(start, end - start, MADV_DONTNEED) != 0:
            raise OSError(ctypes.get_errno(), f"madvise on {library}'s code")


def operations():
    """Each PyTorch operation a float32 decoding job calls (the profile of greedy and beam search), on small tensors."""
    import torch
    import torch.nn.functional as F

    from aiayn.cpu.backend import onednn_linear

    x, w, b, logits = torch.randn(1, 512), torch.randn(512), torch.randn(512), torch.randn(1, 58101)
    heads, flags, token = torch.randn(1, 8, 20, 64), torch.tensor([True, False]), torch.tensor([[3]])
    return {
        "linear on oneDNN (16 x 512 x 512)": lambda: onednn_linear(torch.randn(16, 512), torch.randn(512, 512), None),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(heads, heads, heads),
        "embedding": lambda: F.embedding(torch.tensor([1, 2]), torch.randn(10, 512)),
        "layer_norm": lambda: F.layer_norm(x, (512,), w, b),
        "log_softmax": lambda: logits.log_softmax(-1),
        "topk": lambda: logits.topk(1),
        "silu, in place": lambda: F.silu(x.clone(), inplace=True),
        "add, in place": lambda: x.add_(1.0),
        "mul": lambda: x * 2.0,
        "cat": lambda: torch.cat([x, x]),
        "index_put_": lambda: heads.index_put_((torch.tensor([0]),), torch.zeros(8, 20, 64)),
        "gather": lambda: logits.gather(1, token),
        "where": lambda: torch.where(flags, 1, 2),
        "any": lambda: flags.any(),
        "eq": lambda: token == 3,
        "floor_divide": lambda: token // 2,
        "remainder": lambda: token % 2,
        "sum": lambda: x.sum(),
    }


def worker(engine: str, job: str, sentences: int, work: Path, ops: bool) -> None:
    """One engine in this fresh process: prints the MiB of its library's code each stage paged in, as JSON."""
    kind, library = engine.split("-")[0], LIBRARIES[engine.split("-")[0]]
    for module in bench.RUNTIMES[kind]:
        importlib.import_module(module)
    beam, batch_size = bench.JOBS[job]
    sources = json.loads((work / "sources.json").read_text())[:sentences]
    translate = bench.loaded(engine, work, beam, batch_size, sources)  # as translate.py's worker loads and warms it
    if not code_mappings(library):
        sys.exit(f"{engine}: no executable mapping of {library} in /proc/self/smaps")
    figures = {"resident after loading and a first batch (the import's pages too)": resident_code(library)}

    def stage(name: str, run) -> None:
        drop(library)
        run()
        figures[name] = resident_code(library)

    job_batches = bench.batches(sources, batch_size)
    stage("the whole job", lambda: [translate(batch) for batch in job_batches])
    stage("the whole job again, warm", lambda: [translate(batch) for batch in job_batches])  # no first-time code
    Path("/proc/self/clear_refs").write_text("1")  # every page's accessed bit cleared; the mapped pages stay mapped
    for batch in job_batches:
        translate(batch)
    figures["of that, the pages the job runs (a third pass: accessed bits)"] = referenced_code(library)
    if kind == "aiayn":
        import torch

        from aiayn.cpu.step import CpuStep

        step = CpuStep(translate.model)

        def encoder() -> None:
            with torch.inference_mode():  # as the searches run it
                for batch in job_batches:
                    step.start(bench.padded(batch))

        stage("the encoder alone", encoder)
        start = CpuStep.start

        def start_then_drop(self, *args, **kwargs):
            state = start(self, *args, **kwargs)
            drop(library)
            return state

        CpuStep.start = start_then_drop
        try:
            stage("the steps and search alone", lambda: [translate(batch) for batch in job_batches])
        finally:
            CpuStep.start = start
        if ops:
            with torch.inference_mode():  # as decoding calls them
                calls = operations()
                for call in calls.values():
                    call()  # set-up on first use (oneDNN compiles its kernel) stays out of the figures
                for name, call in calls.items():
                    stage(f"op: {name}", call)
                stage("op: all of them, once each", lambda: [call() for call in calls.values()])
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "aiayn-translate-bench")
    parser.add_argument("--job", default="greedy-b1", choices=list(bench.JOBS))
    parser.add_argument("--sentences", type=int, default=24)
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["ct2-float32", "aiayn-float32"],
        choices=["ct2-float32", "ct2-int8", "aiayn-float32", "aiayn-int8"],
    )
    parser.add_argument("--ops", action="store_true", help="also each PyTorch operation decoding calls, alone")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.job, args.sentences, args.work, args.ops)
        return
    if not Path("/proc/self/smaps").exists():
        sys.exit("code_pages.py reads /proc/self/smaps: Linux only")
    bench.prepare(args.work)
    results = {}
    for engine in args.engines:
        command = [
            sys.executable,
            __file__,
            "--worker",
            engine,
            "--job",
            args.job,
            "--sentences",
            str(args.sentences),
            "--work",
            str(args.work),
        ] + (["--ops"] if args.ops else [])
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{engine}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        results[engine] = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"\n{args.job}, {args.sentences} sentences: MiB of each engine's library code resident after each stage,"
        " the code dropped before it\n"
    )
    print("| stage | " + " | ".join(f"{e} ({LIBRARIES[e.split('-')[0]]})" for e in args.engines) + " |")
    print("|---|" + "---|" * len(args.engines))
    stages = list(dict.fromkeys(name for figures in results.values() for name in figures))
    for name in stages:
        print(
            f"| {name} | "
            + " | ".join(f"{results[e][name]:.1f}" if name in results[e] else "-" for e in args.engines)
            + " |"
        )


if __name__ == "__main__":
    main()
