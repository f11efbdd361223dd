"""Translation speed and memory: aiayn against Hugging Face and CTranslate2, on the same weights.

    .venv/bin/python benchmarks/translate.py                # the full table (about 30-60 minutes)
    .venv/bin/python benchmarks/translate.py --quick        # one round, beam 4 at batch 32, 64 sentences

Measured the way ../shared/PEERS.md describes the peers: one MarianMTModel with opus-mt-en-de's
shapes and random weights (seed 0), saved with save_pretrained and converted for CTranslate2 with its
own TransformersConverter (a stand-in tokenizer: token "t<id>"); 256 source sentences of random ids
(never </s>, <unk> or <pad>), lengths uniform in 8..40 plus </s> (seed 1234), consecutive batches;
every engine forced to exactly 40 output tokens, length penalty 1.0; 2 threads everywhere; aiayn with
oneDNN's kernel caches as the translate command sizes them (`backend.caches_for_translation`).
Each measurement runs in a fresh process (its peak RSS is the memory figure; the worker's JSON also lists
the resident memory after each batch, `batch_rss_mib`); engines alternate
round by round and the table gives medians, with ratios of figures measured in the same run.
The memory tables also give the peak above each engine's runtime, the resident memory once its
library is imported and before it loads weights (torch alone is about 220 MiB, ctranslate2 30), and what is
resident above the runtime at the end split in two (/proc/self/status): anonymous memory, the engine's own data
(weights, caches, buffers, heap), and file pages, the code of its libraries that decoding paged in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT_LEN, THREADS, PAD, EOS, UNK, VOCAB = 40, 2, 58100, 0, 1, 58101
ENGINES = ["hf", "ct2-float32", "ct2-int8", "aiayn-float32", "aiayn-int8"]
JOBS = {  # name: (beam size, batch size)
    "beam4-b32": (4, 32),
    "greedy-b32": (1, 32),
    "beam4-b1": (4, 1),
    "greedy-b1": (1, 1),
}


def marian_config():
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=VOCAB,
        decoder_vocab_size=VOCAB,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=512,
        pad_token_id=PAD,
        decoder_start_token_id=PAD,
        eos_token_id=EOS,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
    )


class StandInTokenizer:
    """What CTranslate2's converter reads from a tokenizer: the vocabulary and two special tokens."""

    eos_token, unk_token = "</s>", "<unk>"

    def get_vocab(self) -> dict[str, int]:
        names = {EOS: "</s>", UNK: "<unk>", PAD: "<pad>"}
        return {names.get(i, f"t{i}"): i for i in range(VOCAB)}


def prepare(work: Path) -> None:
    """The Marian directory, its two CTranslate2 conversions and the source sentences, made once."""
    import torch
    from ctranslate2.converters import TransformersConverter
    from transformers import MarianMTModel

    if not (work / "marian" / "model.safetensors").is_file():
        torch.manual_seed(0)
        model = MarianMTModel(marian_config()).eval()
        print(f"Marian model: {sum(p.numel() for p in model.parameters()):,} parameters", file=sys.stderr)
        model.save_pretrained(work / "marian")
    for quantization in ("float32", "int8"):
        out = work / f"ct2-{quantization}"
        if not (out / "model.bin").is_file():
            converter = TransformersConverter(str(work / "marian"))
            converter.load_tokenizer = lambda *args, **kwargs: StandInTokenizer()
            converter.convert(str(out), quantization=quantization, force=True)
    if not (work / "sources.json").is_file():
        g = torch.Generator().manual_seed(1234)
        lengths = torch.randint(8, 41, (256,), generator=g).tolist()
        sources = [torch.randint(2, PAD, (n,), generator=g).tolist() + [EOS] for n in lengths]
        (work / "sources.json").write_text(json.dumps(sources))


def batches(sources: list[list[int]], size: int) -> list[list[list[int]]]:
    return [sources[i : i + size] for i in range(0, len(sources), size)]


def padded(batch: list[list[int]]):
    import torch

    S = max(len(s) for s in batch)
    return torch.tensor([s + [PAD] * (S - len(s)) for s in batch])


def run_hf(work: Path, beam: int, batch_size: int, sources: list[list[int]]):
    import torch
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(work / "marian").eval()
    options = dict(
        num_beams=beam,
        do_sample=False,
        max_new_tokens=OUT_LEN,
        min_new_tokens=OUT_LEN,
        length_penalty=1.0,
        early_stopping=False,
        forced_eos_token_id=None,
    )

    def translate(batch):
        src = padded(batch)
        with torch.inference_mode():
            out = model.generate(input_ids=src, attention_mask=(src != PAD).long(), **options)
        return [row[1:].tolist() for row in out]  # drop the start token

    return translate


def run_ct2(work: Path, beam: int, batch_size: int, sources: list[list[int]], compute_type: str):
    import ctranslate2

    model = ctranslate2.Translator(
        str(work / f"ct2-{compute_type}"),
        device="cpu",
        compute_type=compute_type,
        intra_threads=THREADS,
        inter_threads=1,
    )
    name = {EOS: "</s>", UNK: "<unk>"}
    ids = {v: k for k, v in name.items()}

    def translate(batch):
        tokens = [[name.get(i, f"t{i}") for i in s] for s in batch]
        results = model.translate_batch(
            tokens,
            beam_size=beam,
            min_decoding_length=OUT_LEN,
            max_decoding_length=OUT_LEN,
            length_penalty=1.0,
            max_batch_size=0,
        )
        return [[ids.get(t, None) if t in ids else int(t[1:]) for t in r.hypotheses[0]] for r in results]

    return translate


def run_aiayn(work: Path, beam: int, batch_size: int, sources: list[list[int]], int8: bool):

    from aiayn.cpu.layout import for_decoding
    from aiayn.cpu.pages import on_huge_pages
    from aiayn.marian.load import load_marian_model

    # what Translator.load does, without a tokenizer (there is none here)
    if int8:
        from aiayn.cpu.memory import MappedReads
        from aiayn.cpu.quantize import quantize_int8

        maps = MappedReads()
        model = quantize_int8(load_marian_model(work / "marian", unk_id=UNK, read=maps.read), release=maps.release)
        maps.detach(model)
        for_decoding(model)
    else:  # the GEMM backend measured on the model's shapes (or AIAYN_GEMM), as Translator.load chooses it
        from aiayn.cpu import backend
        from aiayn.cpu.layout import for_decoding_mapped, reader
        from aiayn.cpu.memory import MappedReads
        from aiayn.model_folder import model_config

        config, rows = model_config(work / "marian"), min(128, beam * batch_size)
        gemm, maps = backend.choose(config, rows), MappedReads()
        model = load_marian_model(work / "marian", unk_id=UNK, read=reader(gemm, config.target_vocab_size, maps))
        gemm = for_decoding_mapped(model, gemm, rows, maps)
    pages = on_huge_pages(model)  # last, as Translator.load does

    search = forced_search(model, beam)

    def translate(batch):
        return [hyps[0].tokens for hyps in search(padded(batch))]

    if int8:  # where the vocabulary's product runs: packed for oneDNN, or plain rows and torch._int_mm
        gemm = "int8 onednn" if model.output_proj.vocabulary.packed is not None else "int8 _int_mm"
    print(f"aiayn {'int8' if int8 else 'float32'} decodes with {gemm}, {pages}", file=sys.stderr, flush=True)
    translate.gemm = gemm  # reported with the worker's figures
    translate.model = model  # for benchmarks/probes/code_pages.py
    return translate


def forced_search(model, beam: int):
    """src (B, S) -> each sentence's hypotheses from aiayn's beam search (greedy at beam 1) over model, every
    output forced to exactly `OUT_LEN` tokens (</s> banned until then, as HF's min_new_tokens and CTranslate2's
    min_decoding_length); model's eos_id must be `EOS`."""
    from aiayn.config import DecodeConfig
    from aiayn.cpu.step import CpuStep
    from aiayn.decode.beam import beam_search
    from aiayn.decode.greedy import greedy_hypotheses

    class NoEos(CpuStep):
        def step(self, tokens, cache):
            log_probs, cache = super().step(tokens, cache)
            log_probs[:, EOS] = float("-inf")
            return log_probs, cache

    step = NoEos(model)
    config = DecodeConfig(beam_size=beam, alpha=1.0, length_penalty="power", max_len=OUT_LEN, extra_len=OUT_LEN)
    search = beam_search if beam > 1 else greedy_hypotheses
    return lambda src: search(step, src, config)


def resident_mib(field: str) -> float:
    """This process's resident memory from /proc/self/status: "VmHWM" its peak (ru_maxrss would include
    the parent's, from before exec), "VmRSS" now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


RUNTIMES = {  # what each engine imports before it loads weights: its runtime's share of the memory
    "hf": ["torch", "transformers.models.marian.modeling_marian"],
    "ct2": ["ctranslate2"],
    "aiayn": ["torch", "aiayn.decode.beam", "aiayn.decode.greedy", "aiayn.marian.load"],
}


def loaded(engine: str, work: Path, beam: int, batch_size: int, sources: list[list[int]]):
    """engine's translate function in this process, on `THREADS` threads, loaded and warmed up (untimed)."""
    if not engine.startswith("ct2"):
        import torch

        torch.set_num_threads(THREADS)
    if engine == "hf":
        translate = run_hf(work, beam, batch_size, sources)
    elif engine.startswith("ct2"):
        translate = run_ct2(work, beam, batch_size, sources, engine.split("-")[1])
    else:
        from aiayn.cpu.backend import caches_for_translation

        caches_for_translation()  # oneDNN's caches as the translate command sizes them, before its first product
        translate = run_aiayn(work, beam, batch_size, sources, engine == "aiayn-int8")
    translate([s[:8] + [EOS] for s in sources[: min(batch_size, 4)]])  # warm-up
    return translate


def worker(args: argparse.Namespace) -> None:
    """One engine, one job, in this fresh process: prints its timing and peak memory as JSON."""
    for module in RUNTIMES[args.worker.split("-")[0]]:  # CTranslate2 runs without torch, as its users would
        importlib.import_module(module)
    runtime_mib = resident_mib("VmRSS")
    runtime_split = {field: resident_mib(field) for field in ("RssAnon", "RssFile")}
    beam, batch_size = JOBS[args.job]
    sources = json.loads((args.work / "sources.json").read_text())[: args.sentences]
    translate = loaded(args.worker, args.work, beam, batch_size, sources)
    outputs, batch_rss, start = [], [], time.perf_counter()
    for batch in batches(sources, batch_size):
        outputs += translate(batch)
        batch_rss.append(round(resident_mib("VmRSS") - runtime_mib, 1))  # above the runtime, after each batch
    seconds = time.perf_counter() - start
    lengths = sorted({len(o) for o in outputs})
    print(
        json.dumps(
            {
                "seconds": seconds,
                "sentences": len(sources),
                "tokens": sum(len(o) for o in outputs),
                "lengths": lengths,
                "peak_mib": resident_mib("VmHWM"),
                "runtime_mib": runtime_mib,
                "batch_rss_mib": batch_rss,
                "first": outputs[:8],
                # at the end, above the runtime: the engine's own data (anonymous) and the library code it paged in (files)
                "anon_mib": resident_mib("RssAnon") - runtime_split["RssAnon"],
                "file_mib": resident_mib("RssFile") - runtime_split["RssFile"],
                "gemm": getattr(translate, "gemm", None),
                "caches": [os.environ.get(name) for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")],
            }
        )
    )


def measure(work: Path, engine: str, job: str, sentences: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": str(THREADS)}
    if OMP_WAIT_POLICY:  # all three engines use GNU OpenMP; spinning threads stall on a shared machine
        env["OMP_WAIT_POLICY"] = OMP_WAIT_POLICY
    if MMAP_THRESHOLD:  # glibc: buffers this big or bigger are mapped, and returned to the system when freed
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        engine,
        "--job",
        job,
        "--work",
        str(work),
        "--sentences",
        str(sentences),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} {job} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["lengths"] != [OUT_LEN]:
        raise RuntimeError(f"{engine} {job}: output lengths {result['lengths']}, not all {OUT_LEN}")
    return result


OMP_WAIT_POLICY: str | None = None  # set from --omp-wait-policy
MMAP_THRESHOLD: int | None = None  # set from --malloc-mmap-threshold


def table(results: dict, jobs: list[str], engines: list[str]) -> str:
    """Medians per job and engine, and the ratios the goals are stated in.

    As PEERS.md measured, a speed ratio pairs the two engines' times from the same round (the rounds
    alternate engines, so the machine's drift between rounds cancels) and the table gives the median
    of those per-round ratios; the per-round ratios of the float32 goal follow the tables.
    """

    def med(job, engine, key):
        return statistics.median(r[key] for r in results[job][engine])

    def per_round(job, a, b):
        pairs = zip(results[job][a], results[job][b])
        return [x["tokens"] / x["seconds"] / (y["tokens"] / y["seconds"]) for x, y in pairs]

    def ratio(job, a, b):
        return f"{statistics.median(per_round(job, a, b)):.2f}x" if a in engines and b in engines else "-"

    lines = [
        "| job | " + " | ".join(engines) + " | aiayn/CT2 f32 | aiayn int8/CT2 int8 | aiayn/HF |",
        "|---" * (len(engines) + 4) + "|",
    ]
    for job in jobs:
        speed = {e: med(job, e, "tokens") / med(job, e, "seconds") for e in engines}
        unit = "tok/s"
        cells = [f"{speed[e]:,.0f}" for e in engines]
        if JOBS[job][1] == 1:  # batch 1: milliseconds per sentence, as PEERS.md gives it
            unit = "ms/sentence"
            cells = [f"{1000 * med(job, e, 'seconds') / med(job, e, 'sentences'):,.0f}" for e in engines]
        lines.append(
            f"| {job} ({unit}) | " + " | ".join(cells) + f" | {ratio(job, 'aiayn-float32', 'ct2-float32')} | "
            f"{ratio(job, 'aiayn-int8', 'ct2-int8')} | {ratio(job, 'aiayn-float32', 'hf')} |"
        )
    lines += [
        "",
        "| peak memory, MiB | " + " | ".join(engines) + " | aiayn/CT2 f32 | aiayn int8/CT2 int8 |",
        "|---" * (len(engines) + 3) + "|",
    ]
    for job in jobs:
        lines.append(memory_row(job, engines, {e: max(r["peak_mib"] for r in results[job][e]) for e in engines}))
    lines += [
        "",
        "| peak above the runtime, MiB | " + " | ".join(engines) + " | aiayn/CT2 f32 | aiayn int8/CT2 int8 |",
        "|---" * (len(engines) + 3) + "|",
    ]
    for job in jobs:
        above = {e: max(r["peak_mib"] - r["runtime_mib"] for r in results[job][e]) for e in engines}
        lines.append(memory_row(job, engines, above))
    if all("anon_mib" in r for job in jobs for e in engines for r in results[job][e]):
        lines += [
            "",
            "| resident at the end above the runtime, MiB: anonymous (the engine's data) + files (library code) | "
            + " | ".join(engines)
            + " | aiayn/CT2 f32 anonymous | aiayn int8/CT2 int8 anonymous |",
            "|---" * (len(engines) + 3) + "|",
        ]
        for job in jobs:
            split = {
                e: (max(r["anon_mib"] for r in results[job][e]), max(r["file_mib"] for r in results[job][e]))
                for e in engines
            }
            cells = [f"{a:,.0f} + {f:,.0f}" for a, f in split.values()]
            mine = [
                f"{split[a][0] / split[b][0]:.2f}" if a in split and b in split and split[b][0] > 0 else "-"
                for a, b in (("aiayn-float32", "ct2-float32"), ("aiayn-int8", "ct2-int8"))
            ]
            lines.append(f"| {job} | " + " | ".join(cells) + " | " + " | ".join(mine) + " |")
    runtimes = {e: statistics.median(r["runtime_mib"] for job in jobs for r in results[job][e]) for e in engines}
    lines += [
        "",
        "runtime (resident after importing the engine, before its weights), MiB: "
        + ", ".join(f"{e} {m:,.0f}" for e, m in runtimes.items()),
    ]
    if "aiayn-float32" in engines and "ct2-float32" in engines:
        lines += [
            "",
            "aiayn/CT2 float32 per round: "
            + "; ".join(
                f"{job} " + ", ".join(f"{r:.2f}" for r in per_round(job, "aiayn-float32", "ct2-float32"))
                for job in jobs
            ),
        ]
    if "aiayn-float32" in engines:  # the GEMM backend each process's Translator.load-style choice took
        lines += [
            "",
            "aiayn float32's GEMM backend per round: "
            + "; ".join(
                f"{job} " + ", ".join(str(r.get("gemm")) for r in results[job]["aiayn-float32"]) for job in jobs
            ),
        ]
    if "aiayn-int8" in engines and "ct2-int8" in engines:
        lines += [
            "",
            "aiayn/CT2 int8 per round: "
            + "; ".join(
                f"{job} " + ", ".join(f"{r:.2f}" for r in per_round(job, "aiayn-int8", "ct2-int8")) for job in jobs
            ),
        ]
    if "aiayn-int8" in engines:  # packed for oneDNN, or plain rows and torch._int_mm
        products = sorted({str(r.get("gemm")) for job in jobs for r in results[job]["aiayn-int8"]})
        lines += ["", "aiayn int8's vocabulary product: " + ", ".join(products)]
    sizes = sorted(
        {
            "/".join(map(str, r.get("caches") or []))
            for job in jobs
            for e in engines
            if e.startswith("aiayn")
            for r in results[job][e]
        }
    )
    if sizes:  # oneDNN's and ideep's kernel caches in aiayn's workers (backend.caches_for_translation)
        lines += ["", "aiayn's kernel caches (oneDNN / ideep entries): " + ", ".join(sizes)]
    return "\n".join(lines)


def memory_row(job: str, engines: list[str], mem: dict[str, float]) -> str:
    ratio = lambda a, b: f"{mem[a] / mem[b]:.2f}" if a in mem and b in mem else "-"  # noqa: E731
    return (
        f"| {job} | "
        + " | ".join(f"{mem[e]:,.0f}" for e in engines)
        + f" | {ratio('aiayn-float32', 'ct2-float32')} | {ratio('aiayn-int8', 'ct2-int8')} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "aiayn-translate-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=256, help="sentences for the batch-32 jobs")
    parser.add_argument("--batch1-sentences", type=int, default=16, help="sentences for the batch-1 jobs")
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    parser.add_argument("--quick", action="store_true", help="one round of beam4-b32 on 64 sentences")
    parser.add_argument(
        "--omp-wait-policy",
        default="default",
        choices=["PASSIVE", "ACTIVE", "default"],
        help="OMP_WAIT_POLICY for every engine (default: unset, as PEERS.md measured; PASSIVE is "
        "steadier when other jobs share the cores, but slows every engine's small steps)",
    )
    parser.add_argument(
        "--malloc-mmap-threshold",
        type=int,
        metavar="BYTES",
        help="MALLOC_MMAP_THRESHOLD_ for every engine (default: unset, glibc's own adaptive threshold)",
    )
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--job", choices=list(JOBS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    global OMP_WAIT_POLICY, MMAP_THRESHOLD
    OMP_WAIT_POLICY = None if args.omp_wait_policy == "default" else args.omp_wait_policy
    MMAP_THRESHOLD = args.malloc_mmap_threshold
    if args.quick:
        args.rounds, args.sentences, args.jobs = 1, 64, ["beam4-b32"]
    import torch

    from gemm import print_host_rates  # the host's own limits come first (issue 18)

    torch.set_num_threads(THREADS)
    print_host_rates()
    args.work.mkdir(parents=True, exist_ok=True)
    prepare(args.work)
    results: dict = {job: {e: [] for e in args.engines} for job in args.jobs}
    for r in range(args.rounds):
        for job in args.jobs:
            n = args.batch1_sentences if JOBS[job][1] == 1 else args.sentences
            order = args.engines[r % len(args.engines) :] + args.engines[: r % len(args.engines)]
            for engine in order:
                res = measure(args.work, engine, job, n)
                results[job][engine].append(res)
                print(
                    f"round {r + 1} {job:11s} {engine:14s} {res['tokens'] / res['seconds']:8.1f} tok/s "
                    f"{res['peak_mib']:7.0f} MiB (runtime {res['runtime_mib']:.0f})"
                    + (f", {res['gemm']}" if res.get("gemm") else ""),
                    file=sys.stderr,
                    flush=True,
                )
    same = (
        {
            e: sum(
                a == b for a, b in zip(results[args.jobs[0]][e][0]["first"], results[args.jobs[0]]["hf"][0]["first"])
            )
            for e in args.engines
        }
        if "hf" in args.engines
        else {}
    )
    print(
        f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {THREADS} threads per engine; "
        f"OMP_WAIT_POLICY={args.omp_wait_policy}; MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD or 'unset'}"
    )
    print(f"first 8 outputs of {args.jobs[0]} identical to Hugging Face's: {same}")
    print(table(results, args.jobs, args.engines))


if __name__ == "__main__":
    main()
