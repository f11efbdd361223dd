"""The pre-softmax projection and the smoothed loss, forward and backward: as the train step runs them now, against
one autograd Function that writes logits and their gradient into one buffer kept across calls (issue 18's proposal).

    .venv/bin/python benchmarks/projection_loss.py [--rows 256] [--rounds 6]

Base shapes (4,096 target tokens, d_model 512, 58,101 pieces, no bias), float32, 2 threads; the two alternate
round by round in one process, medians. Prints the host's GEMM rates first, then the loss and gradient differences
(0.0 when the two agree bit for bit), the page faults of a round and the times. --rows is how many rows the kept
buffer's forward multiplies at once. A measurement for the next step, not yet the train step's code: the model
would return the decoder's output and the loop would call the fused loss.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F

from aiayn.train.loss import label_smoothed_nll, row_chunks

N, D, V, PAD, EPS = 4096, 512, 58101, 58100, 0.1
_kept: dict[torch.dtype, torch.Tensor] = {}


def kept_table(n: int, v: int, dtype: torch.dtype) -> torch.Tensor:
    """An (n, v) view of one buffer per dtype, grown when too small and otherwise reused: no fresh pages."""
    flat = _kept.get(dtype)
    if flat is None or flat.numel() < n * v:
        flat = _kept[dtype] = torch.empty(n * v, dtype=dtype)
    return flat[: n * v].view(n, v)


class KeptBufferLoss(torch.autograd.Function):
    """label_smoothed_nll(h W^T) with the logits, then their gradient, written in place into the kept buffer."""

    @staticmethod
    def forward(ctx, h, w, target, rows_at_once: int):
        keep = target != PAD  # (N,)
        table = kept_table(h.size(0), w.size(0), torch.float32)  # (N, V)
        for i in range(0, h.size(0), rows_at_once):
            torch.mm(h[i : i + rows_at_once], w.t(), out=table[i : i + rows_at_once])
        lse, mean = torch.empty(h.size(0)), torch.empty(h.size(0))  # (N,)
        for rows in row_chunks(table):
            torch.logsumexp(table[rows], -1, out=lse[rows])
            torch.mean(table[rows], -1, out=mean[rows])
        gold = table.gather(1, target[:, None]).squeeze(1)  # (N,)
        nll_sum = ((lse - gold) * keep).sum()
        loss = (1 - EPS) * nll_sum + EPS * ((lse - mean) * keep).sum()
        for rows in row_chunks(table):  # the gradient, as _SmoothedNLL.backward computes it, in place
            g = table[rows].sub_(lse[rows, None]).exp_().sub_(EPS / w.size(0))
            g.scatter_add_(1, target[rows, None], torch.full_like(lse[rows, None], EPS - 1.0))
            g.mul_(keep[rows, None])
        ctx.save_for_backward(h, w)
        ctx.table = table
        ctx.mark_non_differentiable(nll_sum)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        h, w = ctx.saved_tensors
        scale = float(grad_loss)
        return torch.mm(ctx.table, w).mul_(scale), torch.mm(ctx.table.t(), h).mul_(scale), None, None


def as_now(h, w, t, _rows_at_once):
    return label_smoothed_nll(F.linear(h, w)[None], t[None], EPS, PAD)[0]


def kept_buffer(h, w, t, rows_at_once):
    return KeptBufferLoss.apply(h, w, t, rows_at_once)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(2)
    from gemm import print_host_rates  # the host's own limits come first (issue 18)

    print_host_rates()
    g = torch.Generator().manual_seed(0)
    h = torch.randn(N, D, generator=g, requires_grad=True)
    w = (torch.randn(V, D, generator=g) * 0.05).requires_grad_()
    t = torch.randint(0, V - 1, (N,), generator=g)
    engines = {"as now": as_now, "kept buffer": kept_buffer}
    results = {}
    for name, f in engines.items():
        h.grad = w.grad = None
        loss = f(h, w, t, args.rows)
        loss.backward()
        results[name] = (loss.item(), h.grad.clone(), w.grad.clone())
    (l0, gh0, gw0), (l1, gh1, gw1) = results.values()
    print(f"loss {l0} / {l1}; max |d grad h| {(gh0 - gh1).abs().max().item()}, "
          f"max |d grad W| {(gw0 - gw1).abs().max().item()}")
    times: dict[str, list[float]] = {name: [] for name in engines}
    faults: dict[str, int] = {}
    for r in range(args.rounds):
        for name in (list(engines) if r % 2 else list(reversed(engines))):
            h.grad = w.grad = None
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            began = time.perf_counter()
            engines[name](h, w, t, args.rows).backward()
            times[name].append(time.perf_counter() - began)
            faults[name] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    now, kept = (statistics.median(times[n]) for n in engines)
    print(f"\nprojection + loss, forward and backward, {N} x {D} x {V:,}, float32, 2 threads, "
          f"medians of {args.rounds} alternated rounds, {args.rows} rows at once\n")
    print("| engine | seconds | page faults (last round) |\n| --- | --- | --- |")
    for name in engines:
        print(f"| {name} | {statistics.median(times[name]):.2f} | {faults[name]:,} |")
    print(f"\nkept buffer / as now: {kept / now:.2f}")


if __name__ == "__main__":
    main()
