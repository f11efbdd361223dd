"""One training step's throughput, aiayn against Hugging Face's MarianMTModel, same shapes, same batches.

    .venv/bin/python benchmarks/train_step.py [--rounds 5] [--precision fp32 bf16] [--gemm mkl onednn] [--before]
    .venv/bin/python benchmarks/train_step.py --peak-rss [--precision fp32 bf16]   # memory: kept table against before

A step is forward, label-smoothed cross-entropy (0.1), backward and an Adam (0.9, 0.98, 1e-9)
update at the rate of eq. (3), as PEERS.md measured fairseq (1.46-1.54x HF). Both models have
opus-mt-en-de's base shapes (vocabulary 58,101, d_model 512, 6+6 layers, 8 heads, FFN 2048, swish,
scaled and tied embeddings) and random weights; a batch is 128 x 32 source + 128 x 32 target ids,
no padding. The engines alternate round by round in one process (2 threads); medians of rounds.
aiayn runs once per --gemm backend (train.gemm: its fp32 products on MKL or oneDNN; bf16 autocast
multiplies on oneDNN either way). The projection and the loss run as the loop runs them, over one kept
logits table (aiayn.cpu.fused_loss.projected_smoothed_nll); --before adds engines that run them as the step did
before (the model's projection, a fresh table each step), for the ratio of the change in the same run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from functools import partial

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from aiayn.config import ModelConfig  # noqa: E402
from aiayn.cpu import train_attention as kernels  # noqa: E402
from aiayn.cpu.fused_loss import KeptTable, projected_smoothed_nll  # noqa: E402
from aiayn.cpu.training import CpuTrainingStep  # noqa: E402
from aiayn.model import Transformer  # noqa: E402
from aiayn.train.loss import label_smoothed_nll  # noqa: E402
from aiayn.train.schedule import rate  # noqa: E402

V, PAD, EOS = 58101, 58100, 0


def aiayn_model() -> Transformer:
    config = ModelConfig.preset(
        "base",
        vocab_size=V,
        pad_id=PAD,
        bos_id=PAD,
        eos_id=EOS,
        unk_id=1,
        activation="swish",
        sinusoid_layout="halves",
        final_logits_bias=True,
        max_len=512,
    )
    return Transformer(config).train()


def hf_model():
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=V,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="swish",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        max_position_embeddings=512,
        dropout=0.1,
    )
    return MarianMTModel(config).train()


def aiayn_step(
    model,
    optimizer,
    src,
    tgt_in,
    tgt_out,
    step: int,
    bf16: bool,
    attention: str = "auto",
    backend: str = "mkl",
    kept: KeptTable | None = None,
) -> float:
    """As aiayn's training loop computes a step: its forward context (eq. (1)'s kernel for the batch's
    length, train.attention; train.gemm's products; its dropout masks) and its loss, the projection in the
    loss over a kept table. kept=None: the step as it was before (the model's projection, then the loss)."""
    for group in optimizer.param_groups:
        group["lr"] = rate(step, 512, 4000)
    dtype = torch.bfloat16 if bf16 else None
    with CpuTrainingStep(attention, torch.device("cpu"), dtype, backend).forward(max(src.size(1), tgt_in.size(1))):
        out = model(src, tgt_in, project=kept is None)
    if kept is None:
        loss, _, n = label_smoothed_nll(out, tgt_out, 0.1, PAD)
    else:
        loss, _, n = projected_smoothed_nll(
            out, model.output_proj.matrix, model.logits_bias, tgt_out, 0.1, PAD, kept, dtype, backend
        )
    (loss / n).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item() / n


def hf_step(model, optimizer, src, tgt_in, tgt_out, step: int, bf16: bool) -> float:
    for group in optimizer.param_groups:
        group["lr"] = rate(step, 512, 4000)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=tgt_in).logits
    loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def batch(generator: torch.Generator, B: int = 128, L: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src = torch.randint(2, PAD, (B, L), generator=generator)
    tgt = torch.randint(2, PAD, (B, L + 1), generator=generator)
    return src, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()


def peak_rss(loss: str, precision: str, steps: int = 4) -> None:
    """One aiayn engine (MKL products) alone for a few steps in this process; prints its peak resident memory."""
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = aiayn_model()
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9, fused=True)
    generator, kept = torch.Generator().manual_seed(1234), KeptTable() if loss == "kept" else None
    for step in range(1, steps + 1):
        aiayn_step(model, optimizer, *batch(generator), step, precision == "bf16", kept=kept)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


def peak_rss_table(precisions: list[str]) -> None:
    """Peak RSS of 4 steps, each engine in a fresh process: the loss over a kept table against the loss as before."""
    print("| precision | loss | peak RSS MiB |\n| --- | --- | --- |")
    for precision in precisions:
        for loss in ("kept", "before"):
            out = subprocess.run(
                [sys.executable, __file__, "--child-rss", loss, precision], check=True, capture_output=True, text=True
            ).stdout
            print(f"| {precision} | {'kept table' if loss == 'kept' else 'as before'} | {int(out.split()[-1]):,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--peak-rss",
        action="store_true",
        help="instead of timing: aiayn's peak RSS over 4 steps, each way in a fresh process",
    )
    parser.add_argument("--child-rss", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fused-adam", action="store_true", help="fused Adam for aiayn (as its training loop uses)")
    parser.add_argument(
        "--attention",
        default="auto",
        choices=kernels.KERNELS,
        help="aiayn's attention kernel (train.attention; auto = math on a CPU); HF keeps its own",
    )
    parser.add_argument(
        "--gemm",
        nargs="+",
        default=["mkl", "onednn"],
        choices=["mkl", "onednn"],
        help="aiayn's fp32 products (train.gemm), one aiayn engine each",
    )
    parser.add_argument(
        "--before",
        action="store_true",
        help="also aiayn with the projection in the model and a fresh logits table (before issue 18's "
        "kept table), one more engine per --gemm backend",
    )
    args = parser.parse_args()
    if args.child_rss:
        return peak_rss(*args.child_rss)
    if args.peak_rss:
        return peak_rss_table(args.precision)
    kernel = kernels.attention_kernel(
        args.attention, torch.device("cpu"), 33
    )  # as the loop picks it for 32 + 33 tokens
    torch.set_num_threads(args.threads)
    from gemm import print_host_rates  # the host's own limits come first (issue 18)

    print_host_rates()
    torch.manual_seed(0)
    engines = {}
    for backend in args.gemm:  # the same initial weights for each (seed 0)
        torch.manual_seed(0)
        engines[f"aiayn {backend}"] = (
            aiayn_model(),
            partial(aiayn_step, attention=args.attention, backend=backend, kept=KeptTable()),
        )
        if args.before:
            torch.manual_seed(0)
            engines[f"aiayn {backend}, loss as before"] = (
                aiayn_model(),
                partial(aiayn_step, attention=args.attention, backend=backend),
            )
    engines["Hugging Face"] = (hf_model(), hf_step)
    optimizers = {
        name: torch.optim.Adam(
            m.parameters(), betas=(0.9, 0.98), eps=1e-9, fused=args.fused_adam and name.startswith("aiayn")
        )
        for name, (m, _) in engines.items()
    }
    generator = torch.Generator().manual_seed(1234)
    rows = []
    for precision in args.precision:
        bf16 = precision == "bf16"
        times: dict[str, list[float]] = {name: [] for name in engines}
        for r in range(args.rounds + 1):  # round 0 is an untimed warm-up
            src, tgt_in, tgt_out = batch(generator)
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                model, step = engines[name]
                began = time.perf_counter()
                step(model, optimizers[name], src, tgt_in, tgt_out, r + 1, bf16)
                if r:
                    times[name].append(time.perf_counter() - began)
            if r:
                print(
                    f"{precision} round {r}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()), flush=True
                )
        tokens = 2 * 128 * 32
        hf = times.pop("Hugging Face")
        for name, ours in times.items():
            ratios = [h / a for a, h in zip(ours, hf)]
            rows.append(
                (
                    precision,
                    name,
                    tokens / statistics.median(ours),
                    tokens / statistics.median(hf),
                    statistics.median(ratios),
                )
            )
    print(
        f"\none training step, base shapes, 128 x 32 + 128 x 32 tokens, {args.threads} threads, "
        f"medians of {args.rounds} alternated rounds; aiayn's attention kernel: {kernel}\n"
    )
    print("| precision | engine | aiayn tok/s | Hugging Face tok/s | ratio (per round, median) |")
    print("| --- | --- | --- | --- | --- |")
    for precision, name, ours, theirs, ratio in rows:
        print(f"| {precision} | {name} | {ours:,.0f} | {theirs:,.0f} | {ratio:.2f}x |")
    print("\nPEERS.md, same machine: fairseq 1.46-1.54x Hugging Face (fp32); goal 1.75x.")


if __name__ == "__main__":
    main()
