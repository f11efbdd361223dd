"""The pre-softmax projection and the smoothed loss, forward and backward: as the train step ran them before (F.linear,
then label_smoothed_nll: a fresh logits table and a fresh gradient at each call) against the step's loss now, one
autograd Function that writes the logits and then their gradient over one table kept across calls (issue 18).

    .venv/bin/python benchmarks/probes/projection_loss.py [--rows 256] [--rounds 6]
    .venv/bin/python benchmarks/probes/projection_loss.py --backend onednn [--onednn-block-mib 24]

Base shapes (4,096 target tokens, d_model 512, 58,101 pieces, no bias), float32, 2 threads; the two alternate
round by round in one process, medians. Prints the host's GEMM rates first, then the loss and gradient differences
(0.0 when the two agree bit for bit), the page faults of a round and the times. --rows is how many rows the kept
table's forward multiplies at once (aiayn.cpu.fused_loss.PRODUCT_ROWS). benchmarks/train_step.py --before measures the
whole step both ways.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F

from aiayn.cpu import fused_loss as loss
from aiayn.cpu.train_gemm import products
from aiayn.train.loss import label_smoothed_nll

N, D, V, PAD, EPS = 4096, 512, 58101, 58100, 0.1
_kept = loss.KeptTable()


def as_before(h, w, t, backend):
    with products(backend):  # train.gemm's products for F.linear, as the step's forward context enters them
        logits = F.linear(h, w)
    return label_smoothed_nll(logits[None], t[None], EPS, PAD)[0]


def kept_table(h, w, t, backend):
    return loss.projected_smoothed_nll(h[None], w, None, t[None], EPS, PAD, _kept, None, backend)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--backend", default="mkl", choices=["mkl", "onednn"], help="train.gemm's products")
    parser.add_argument(
        "--onednn-block-mib",
        type=int,
        default=loss.ONEDNN_BLOCK_BYTES >> 20,
        help="oneDNN's blocks of the kept table's forward product (aiayn.train.loss.ONEDNN_BLOCK_BYTES)",
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    loss.PRODUCT_ROWS, loss.ONEDNN_BLOCK_BYTES = args.rows, args.onednn_block_mib << 20
    from gemm import print_host_rates  # the host's own limits come first (issue 18)

    print_host_rates()
    g = torch.Generator().manual_seed(0)
    h = torch.randn(N, D, generator=g, requires_grad=True)
    w = (torch.randn(V, D, generator=g) * 0.05).requires_grad_()
    t = torch.randint(0, V - 1, (N,), generator=g)
    engines = {"as before": as_before, "kept table": kept_table}
    results = {}
    for name, f in engines.items():
        h.grad = w.grad = None
        value = f(h, w, t, args.backend)
        value.backward()
        results[name] = (value.item(), h.grad.clone(), w.grad.clone())
    (l0, gh0, gw0), (l1, gh1, gw1) = results.values()
    print(
        f"loss {l0} / {l1}; max |d grad h| {(gh0 - gh1).abs().max().item()}, "
        f"max |d grad W| {(gw0 - gw1).abs().max().item()}"
    )
    times: dict[str, list[float]] = {name: [] for name in engines}
    faults: dict[str, int] = {}
    for r in range(args.rounds):
        for name in list(engines) if r % 2 else list(reversed(engines)):
            h.grad = w.grad = None
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            began = time.perf_counter()
            engines[name](h, w, t, args.backend).backward()
            times[name].append(time.perf_counter() - began)
            faults[name] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    before, kept = (statistics.median(times[n]) for n in engines)
    print(
        f"\nprojection + loss, forward and backward, {N} x {D} x {V:,}, float32, 2 threads, "
        f"medians of {args.rounds} alternated rounds, products on {args.backend} "
        f"({args.rows} rows at once on MKL, {args.onednn_block_mib} MiB blocks on oneDNN)\n"
    )
    print("| engine | seconds | page faults (last round) |\n| --- | --- | --- |")
    for name in engines:
        print(f"| {name} | {statistics.median(times[name]):.2f} | {faults[name]:,} |")
    print(f"\nkept table / as before: {kept / before:.2f}")


if __name__ == "__main__":
    main()
