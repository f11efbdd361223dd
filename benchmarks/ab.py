"""Two checkouts of aiayn alternated in one run: the same jobs, the same inputs, new/old time ratios.

    git worktree add --detach /tmp/aiayn-old <commit>
    python benchmarks/ab.py /tmp/aiayn-old/src src --rounds 5

Each round starts one worker process per checkout (in alternating order), with PYTHONPATH set to
that checkout's src/, one process per job. The decoding jobs go through the public path: the new checkout
first saves a random model of opus-mt-en-de's shapes (as ../shared/PEERS.md measures the peers) from a fixed
seed, with </s> made never to win so that every output runs to OUT_LEN tokens (or --model names a saved
folder); each worker loads it with `Translator.load` (MKL forced; int8: `int8=True`) and times
`Translator.search` with beam 4 and greedy at batch 32 and at batch 1 (8 sentences one at a time), and int8
beam 4 at batch 32. The training jobs time three optimizer steps (`train`: fp32, small shapes) and eight of
the Multi30k recipe's (`train-m30k`: its model and ~3,600-token batches, bf16 autocast where the CPU has it,
through the checkout's own training step). The imports follow each checkout's layout (the CPU package or the
modules before it). The table gives, per job, the median over rounds of the per-round ratio new/old of the
times (above 1: the new code is slower) and of the worker's peak resident memory (loading included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT_LEN, BATCH, SEED = 40, 32, 1234
WORKER = r"""
import json, sys, time, torch
from aiayn.config import DecodeConfig, ModelConfig
from aiayn.model import Transformer
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.schedule import rate

torch.set_num_threads(2)
out_len, batch, seed, jobs, model_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","), sys.argv[5]
B1_SENTENCES = 8
times = {}
if any(not j.startswith("train") for j in jobs):
    try:
        from aiayn.translator import Translator
    except ImportError:  # a checkout from before aiayn.translator
        from aiayn.decode.translate import Translator
    int8 = "int8-beam4" in jobs
    translator = Translator.load(model_dir, int8=int8, gemm=None if int8 else "mkl")  # the public path
    config = translator.model.config
    V, EOS, PAD = config.vocab_size, config.eos_id, config.pad_id
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 41, (batch,), generator=g)
    src = torch.full((batch, 41), PAD)
    for i, n in enumerate(lengths.tolist()):
        src[i, :n] = torch.randint(2, V - 1, (n,), generator=g)
        src[i, n] = EOS
    cfg = DecodeConfig(beam_size=4, alpha=1.0, length_penalty="power", max_len=out_len, extra_len=out_len)
    searches = {"beam4": (cfg, batch), "greedy": (cfg.replace(beam_size=1), batch), "beam4-b1": (cfg, 1),
                "greedy-b1": (cfg.replace(beam_size=1), 1), "int8-beam4": (cfg, batch)}
    for job, (c, rows) in searches.items():
        if job in jobs:
            translator.search(src[:min(4, rows)], c)  # warm-up
            began = time.perf_counter()
            for i in range(0, batch if rows > 1 else B1_SENTENCES, rows):  # batch 1: sentences one at a time
                translator.search(src[i : i + rows], c)
            times[job] = time.perf_counter() - began
def timed_steps(one_step, n):
    one_step(0)  # warm-up
    began = time.perf_counter()
    for i in range(1, n + 1):
        one_step(i)
    return time.perf_counter() - began
if "train" in jobs:
    torch.manual_seed(seed)
    config = ModelConfig.preset("small", vocab_size=8000, max_len=256)
    model = Transformer(config).train()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(4, 8000, (128, 32), generator=g), torch.randint(4, 8000, (128, 33), generator=g)
    def one_step(i):
        for group in opt.param_groups:
            group["lr"] = rate(i + 1, config.d_model, 4000)
        loss, _, _ = label_smoothed_nll(model(src, tgt[:, :-1]), tgt[:, 1:], 0.1, config.pad_id)
        (loss / (tgt.size(0) * 32)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    times["train"] = timed_steps(one_step, 3)
if "train-m30k" in jobs:  # the Multi30k recipe's step: bf16 autocast where native, the loop's own contexts
    from aiayn.data.batching import Batch
    try:
        from aiayn.cpu import train_gemm as gemm, train_attention as kernels
    except ImportError:  # a checkout from before aiayn.cpu
        from aiayn.train import gemm, kernels
    from aiayn.train import precision
    try:
        from aiayn.cpu.training import CpuTrainingStep
        def forward_context(attention, device, dtype, backend, length):
            return CpuTrainingStep(attention, device, dtype, backend).forward(length)
    except ImportError:
        try:
            from aiayn.train.loop import forward_context
        except ImportError:  # a checkout from before forward_context: the contexts the loop entered then
            import contextlib
            def forward_context(attention, device, dtype, backend, length):
                stack = contextlib.ExitStack()
                kernel = kernels.attention_kernel(attention, device, length)
                for c in (precision.autocast(device, dtype), kernels.attention(kernel), gemm.products(backend)):
                    stack.enter_context(c)
                return stack
    torch.manual_seed(seed)
    config = ModelConfig.preset("small", vocab_size=8000, max_len=256, p_drop=0.3)
    model = Transformer(config).train()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    cpu, dtype = torch.device("cpu"), precision.autocast_dtype("auto", False)
    g = torch.Generator().manual_seed(seed)
    shapes = [(117, 32), (260, 14), (196, 20), (400, 10)]  # (sentences, tokens): the recipe's ~3,600-token batches
    batches = []
    for B, T in shapes:
        src, tgt = torch.randint(4, 8000, (B, T), generator=g), torch.randint(4, 8000, (B, T + 1), generator=g)
        batches.append(Batch(src, tgt[:, :-1], tgt[:, 1:], B * T, B * T))
    try:
        try:
            from aiayn.cpu.fused_loss import KeptTable, projected_smoothed_nll
        except ImportError:  # a checkout from before aiayn.cpu
            from aiayn.train.loss import KeptTable, projected_smoothed_nll
        kept = KeptTable()
    except ImportError:  # a checkout from before: the model's projection, then the loss
        kept = None
    def m30k_step(i):
        b = batches[i % len(batches)]
        for group in opt.param_groups:
            group["lr"] = rate(i + 1, config.d_model, 300, 0.42)
        with forward_context("auto", cpu, dtype, "mkl", max(b.src.size(1), b.tgt_in.size(1))):
            if kept is None:
                logits = model(b.src, b.tgt_in)
            else:  # the loop's loss since issue 18: the projection in the loss, over a kept table
                hidden = model(b.src, b.tgt_in, project=False)
        if kept is None:
            loss, _, _ = label_smoothed_nll(logits, b.tgt_out, 0.1, config.pad_id)
        else:
            loss, _, _ = projected_smoothed_nll(hidden, model.output_proj.matrix, model.logits_bias, b.tgt_out, 0.1,
                                                config.pad_id, kept, dtype, "mkl")
        (loss / b.n_tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    times["train-m30k"] = timed_steps(m30k_step, 8)
import resource
times["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(times))
"""


MAKER = r"""
import gzip, sys, torch
from aiayn.config import ModelConfig
from aiayn.data.vocab import Vocab
from aiayn.model import Transformer
from aiayn.weights import save_model

seed, directory, text = int(sys.argv[1]), sys.argv[2], sys.argv[3]
V, EOS, PAD = 58101, 0, 58100
torch.manual_seed(seed)
config = ModelConfig(vocab_size=V, d_model=512, d_ff=2048, n_heads=8, n_layers=6, activation="swish",
                     sinusoid_layout="halves", final_logits_bias=True, pad_id=PAD, bos_id=PAD, eos_id=EOS,
                     unk_id=1, max_len=512)
model = Transformer(config)
with torch.no_grad():
    model.logits_bias[EOS] = -1e4  # </s> never wins: every output runs to max_len, the same work in both checkouts
with gzip.open(text, "rt", encoding="utf-8") as f:
    lines = [next(f) for _ in range(2000)]
save_model(model, directory, Vocab.train(lines, 1000).proto)  # the tokenizer is loaded, not used: ids go in
"""


def make_model(new_src: Path, directory: Path) -> None:
    """A random opus-mt-en-de-shaped model saved by the new checkout, as `Translator.load` reads it."""
    text = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "train.en.gz"
    env = {**os.environ, "PYTHONPATH": str(new_src.resolve()), "OMP_NUM_THREADS": "2"}
    cmd = [sys.executable, "-c", MAKER, str(SEED), str(directory), str(text)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"making the model with {new_src} failed:\n{done.stderr[-2000:]}")


def run_worker(src: Path, jobs: list[str], model_dir: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "OMP_NUM_THREADS": "2"}
    cmd = [sys.executable, "-c", WORKER, str(OUT_LEN), str(BATCH), str(SEED), ",".join(jobs), str(model_dir)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker for {src} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="the old checkout's src/")
    parser.add_argument("new", type=Path, help="the new checkout's src/")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--jobs",
        nargs="+",
        default=["beam4", "greedy", "beam4-b1", "greedy-b1", "int8-beam4", "train", "train-m30k"],
        help="beam4, greedy (batch 32), beam4-b1, greedy-b1 (each sentence alone), int8-beam4, train, train-m30k",
    )
    parser.add_argument(
        "--model",
        type=Path,
        help="a saved model folder to decode with (default: a random "
        "opus-mt-en-de-shaped one, made by the new checkout in a temporary folder)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ab-model-") as scratch:
        model_dir = args.model or Path(scratch) / "model"
        if args.model is None and any(not job.startswith("train") for job in args.jobs):
            make_model(args.new, model_dir)
        alternate(args, model_dir)


def alternate(args: argparse.Namespace, model_dir: Path) -> None:
    ratios: dict[str, list[float]] = {job: [] for job in args.jobs}
    peaks: dict[str, list[float]] = {job: [] for job in args.jobs}
    for r in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        if r % 2:
            order.reverse()
        for job in args.jobs:  # each job in a process of its own, so that its peak memory is its own
            times = {name: run_worker(src, [job], model_dir) for name, src in order}
            ratios[job].append(times["new"][job] / times["old"][job])
            peaks[job].append(times["new"]["peak_mib"] / times["old"]["peak_mib"])
            print(
                f"round {r + 1}: {job} old {times['old'][job]:.2f}s {times['old']['peak_mib']:.0f} MiB, "
                f"new {times['new'][job]:.2f}s {times['new']['peak_mib']:.0f} MiB "
                f"(time {ratios[job][-1]:.3f}, peak {peaks[job][-1]:.3f})",
                flush=True,
            )
    print(
        "\n| job | new/old time, median of per-round ratios | per round | new/old peak RSS, median |"
        "\n| --- | --- | --- | --- |"
    )
    for job, values in ratios.items():
        print(
            f"| {job} | {statistics.median(values):.3f} | {', '.join(f'{v:.3f}' for v in values)} "
            f"| {statistics.median(peaks[job]):.3f} |"
        )


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - began:.0f} s; load average {os.getloadavg()[0]:.1f})")
