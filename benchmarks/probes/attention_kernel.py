"""Eq. (1)'s training kernel: PyTorch's math kernel against its fused one, in whole training steps.

    .venv/bin/python benchmarks/probes/attention_kernel.py [--threads 2] [--rounds 6]

Each row is one training step (forward, label-smoothed loss, backward, fused Adam) of a model with
random weights on a random batch (a sixth of the rows padded), in bf16 autocast unless said; the two
kernels alternate round by round in one process, the first round untimed; medians. The rows are the
shapes of aiayn's CPU recipes (Multi30k, the lab, parsing) and a long batch. It measures the rule of
`train.attention: auto` (aiayn.cpu.train_attention): math for batches of at most 128 positions on a CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from aiayn.config import ModelConfig
from aiayn.model import Transformer
from aiayn.train.loss import label_smoothed_nll

ROWS = [  # name, (layers, d_model), (batch, source, target tokens), bf16
    ("Multi30k recipe", (3, 256), (260, 14, 15), True),
    ("Multi30k recipe, fp32", (3, 256), (260, 14, 15), False),
    ("the lab's model", (2, 128), (260, 14, 15), True),
    ("parsing's shapes", (4, 256), (60, 30, 65), True),
    ("a long batch", (4, 256), (16, 128, 256), True),
]


def step_seconds(layers: int, d_model: int, B: int, S: int, T: int, bf16: bool, rounds: int) -> dict[str, float]:
    config = ModelConfig.preset(
        "small", vocab_size=8000, n_layers=layers, d_model=d_model, d_ff=4 * d_model, p_drop=0.3, max_len=1024
    )
    torch.manual_seed(0)
    model = Transformer(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, 8000, (B, S), generator=g), torch.randint(4, 8000, (B, T + 1), generator=g)
    src[: B // 6, -S // 4 :] = config.pad_id
    tgt[: B // 6, -T // 5 :] = config.pad_id

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt[:, :-1])
        loss, _, n = label_smoothed_nll(logits, tgt[:, 1:], 0.1, config.pad_id)
        (loss / n).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    kernels = {"fused": contextlib.nullcontext, "math": lambda: sdpa_kernel([SDPBackend.MATH])}
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for r in range(rounds + 1):
        for name in list(kernels) if r % 2 == 0 else list(reversed(kernels)):
            with kernels[name]():
                began = time.perf_counter()
                step()
                if r:
                    times[name].append(time.perf_counter() - began)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"one training step, {args.threads} threads, medians of {args.rounds} alternated rounds\n")
    print("| model | layers, d_model | batch x source + target | precision | fused ms | math ms | math / fused |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (layers, d_model), (B, S, T), bf16 in ROWS:
        s = step_seconds(layers, d_model, B, S, T, bf16, args.rounds)
        print(
            f"| {name} | {layers}+{layers}, {d_model} | {B} x {S} + {T} | {'bf16' if bf16 else 'fp32'} | "
            f"{s['fused'] * 1000:,.0f} | {s['math'] * 1000:,.0f} | {s['math'] / s['fused']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
