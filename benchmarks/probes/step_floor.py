"""How fast batch-1 decoding could be on this host: aiayn's step against its own products alone, and CTranslate2.

At batch 1 a float32 decoding step reads every decoder matrix and the whole vocabulary matrix once
(207 MB for opus-mt-en-de's shapes) to multiply them by 1 row (greedy) or 4 (beam 4), so its time is
bound by memory bandwidth, not arithmetic. For greedy and beam 4 at batch 1 this prints, per output token:

- CTranslate2 float32 and aiayn float32, each in a fresh process (`translate.py`'s workers: the same
  model, sentences and forced 40 tokens as `benchmarks/translate.py`), and aiayn's speed over CTranslate2's;
- "products": aiayn's step products alone on the backend its worker took (`aiayn.cpu.backend.measure`:
  the decoder's step matrices and the vocabulary, of the model's shapes, streamed from memory);
- "tiny step": the same search on a model of the same structure with tiny matrices (d_model 16, 100
  pieces) on the same backend: what a step costs besides reading the matrices (Python, the calls' own
  set-up, attention, the search's bookkeeping);
- "ceiling": CTranslate2's time per token over aiayn's products alone, the most aiayn could be faster
  than CTranslate2 if nothing but its products were left. Where it is below a goal (1.2x), no work
  outside the products reaches that goal on this host.

It also prints the host's streaming rate (a 2-thread sum over 238 MB) and the rate the products reach.
Rounds alternate the two engines; the table gives medians, and the ratios pair figures of one round.

    .venv/bin/python benchmarks/probes/step_floor.py --rounds 3   # prepares translate.py's folder if needed
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the peers' workers (translate.py)
import translate as T  # the peers' model, sentences and workers (benchmarks/, as load_memory.py imports it)

JOBS = ["greedy-b1", "beam4-b1"]
TINY = dict(d_model=16, d_ff=64, vocab_size=100)  # the same structure (layers, heads, activation), tiny matrices


def tiny_step_seconds(config, gemm: str, beam: int, repeats: int = 5) -> float:
    """Seconds per step of `beam`-wide search at batch 1 on config's structure with `TINY` sizes, forced to 40 tokens."""
    import dataclasses

    import torch

    from aiayn.cpu.layout import for_decoding
    from aiayn.model import Transformer

    ids = dict(eos_id=T.EOS, unk_id=T.UNK, pad_id=2, bos_id=2)  # as the benchmark's model, </s> 0 (forced_search)
    tiny = dataclasses.replace(config, **TINY, tgt_vocab_size=None, d_k=None, d_v=None, d_decoder_ff=None, **ids)
    torch.manual_seed(0)
    search = T.forced_search(for_decoding(Transformer(tiny), gemm, beam), beam)
    src = torch.cat([torch.randint(3, tiny.vocab_size, (1, 23)), torch.tensor([[T.EOS]])], dim=1)  # the mean length
    search(src)  # untimed: first calls set up
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        search(src)
        times.append(time.perf_counter() - began)
    return statistics.median(times) / T.OUT_LEN


def stream_rate(megabytes: int = 238) -> float:
    """GB/s of a 2-thread sum over a float32 tensor of that size: what the host streams from memory."""
    import torch

    from aiayn.cpu.backend import best_seconds

    x = torch.ones(megabytes * (1 << 20) // 4)
    return x.numel() * 4 / best_seconds(x.sum, 5) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "aiayn-translate-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=16)
    args = parser.parse_args()

    import torch

    from aiayn.cpu import backend
    from aiayn.model_folder import model_config
    from gemm import print_host_rates

    torch.set_num_threads(T.THREADS)
    print_host_rates()
    args.work.mkdir(parents=True, exist_ok=True)
    T.prepare(args.work)
    config = model_config(args.work / "marian")
    D, V = config.d_model, config.target_vocab_size
    step_bytes = 4 * (config.decoder.layers * sum(o * i for o, i in backend.step_matrices(config)) + V * D)
    figures: dict[str, dict[str, list]] = {
        job: {k: [] for k in ("ct2", "aiayn", "gemm", "products", "tiny")} for job in JOBS
    }
    for r in range(args.rounds):
        for job in JOBS:
            engines = ["ct2-float32", "aiayn-float32"][:: 1 if r % 2 == 0 else -1]
            for engine in engines:
                res = T.measure(args.work, engine, job, args.sentences)
                figures[job]["ct2" if engine.startswith("ct2") else "aiayn"].append(res["seconds"] / res["tokens"])
                if engine.startswith("aiayn"):
                    figures[job]["gemm"].append(res["gemm"])
            gemm, beam = figures[job]["gemm"][-1], T.JOBS[job][0]  # at batch 1, the step's rows are the beam's
            with torch.inference_mode():
                figures[job]["products"].append(backend.measure(config, beam)[gemm])
            figures[job]["tiny"].append(tiny_step_seconds(config, gemm, beam))
            f = {k: v[-1] for k, v in figures[job].items()}
            print(
                f"round {r + 1} {job}: CT2 {1e3 * f['ct2']:.2f} ms/token, aiayn {1e3 * f['aiayn']:.2f} ({gemm}), "
                f"products {1e3 * f['products']:.2f}, tiny step {1e3 * f['tiny']:.2f}",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {T.THREADS} threads; "
        f"streaming (2-thread sum): {stream_rate():.1f} GB/s; a step's matrices: {step_bytes / 1e6:.0f} MB"
    )
    print(
        "| job | CT2 ms/token | aiayn ms/token | aiayn/CT2 speed | backend | products ms (GB/s) | tiny step ms "
        "| products + tiny step | ceiling: CT2 / products |"
    )
    print("|---" * 9 + "|")
    for job in JOBS:
        f = figures[job]
        med = {k: statistics.median(f[k]) for k in ("ct2", "aiayn", "products", "tiny")}
        speed = statistics.median(c / a for c, a in zip(f["ct2"], f["aiayn"]))
        ceiling = statistics.median(c / p for c, p in zip(f["ct2"], f["products"]))
        backends = ", ".join(sorted(set(f["gemm"])))
        print(
            f"| {job} | {1e3 * med['ct2']:.2f} | {1e3 * med['aiayn']:.2f} | {speed:.2f}x | {backends} "
            f"| {1e3 * med['products']:.2f} ({step_bytes / med['products'] / 1e9:.1f}) | {1e3 * med['tiny']:.2f} "
            f"| {1e3 * (med['products'] + med['tiny']):.2f} | {ceiling:.2f}x |"
        )
    print(
        "\nper round, aiayn/CT2 speed: "
        + "; ".join(
            f"{job} " + ", ".join(f"{c / a:.2f}" for c, a in zip(figures[job]["ct2"], figures[job]["aiayn"]))
            for job in JOBS
        )
    )


if __name__ == "__main__":
    main()
