"""The host's own limits: float32 GEMM rates of MKL and oneDNN for the shapes aiayn's jobs run.

    python benchmarks/gemm.py            # the table alone
    python benchmarks/gemm.py --choice 8 # and 8 of Translator.load's measurements for opus-mt's shapes
    from gemm import print_host_rates    # benchmarks/translate.py and train_step.py print it first

Every figure a benchmark reports comes with these rates, so that a different figure on another
machine of the same kind can be explained (issue 18: on some 2-core EPYC hosts MKL's sgemm reaches
about half of oneDNN's for decoding's shapes). MKL is what `x @ W` and `F.linear` run on a CPU
build of PyTorch; oneDNN is reached through `torch._C._nn.mkldnn_linear` with a packed weight.
Rates are the best of a few repeats, in GFLOP/s, on the threads torch uses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aiayn.cpu.backend import best_seconds, onednn_linear

# (name, rows, in, out): decoding's pre-softmax projection (opus-mt-en-de: 58,101 pieces) at beam 4 x
# batch 32, batch 32, beam 4 x batch 1 and greedy at batch 1; an FFN layer at beam 4 x batch 32 and at beam 4 x
# batch 1 (one matrix, held in the cache: a step streams its layers' from memory); the training step's projection.
SHAPES = (
    ("decode projection, 128 rows", 128, 512, 58101),
    ("decode projection, 32 rows", 32, 512, 58101),
    ("decode projection, 4 rows", 4, 512, 58101),
    ("decode projection, 1 row", 1, 512, 58101),
    ("decode FFN W_1, 128 rows", 128, 512, 2048),
    ("decode FFN W_1, 4 rows", 4, 512, 2048),
    ("train FFN W_1, 4096 rows", 4096, 512, 2048),
    ("train projection, 4096 rows", 4096, 512, 37000),
)


def host_rates(repeats: int = 3) -> list[tuple[str, float, float | None, float | None, float | None]]:
    """(shape name, MKL GFLOP/s, oneDNN GFLOP/s, oneDNN on the matrix packed for it GFLOP/s, aiayn's own product
    GFLOP/s) for each shape; None where PyTorch has no oneDNN, packed only for decoding's shapes (what `+packed`
    runs: the vocabulary, and the decoder's layers where they run on oneDNN), aiayn's own only for decoding's
    shapes of up to `gemv.MAX_ROWS` rows where it is built (what `onednn+gemv` runs at batch 1)."""
    from aiayn.cpu import gemv
    from aiayn.cpu.packed import float32_available, reorder_float32

    rows_out = []
    for name, n, d_in, d_out in SHAPES:
        x, w = torch.randn(n, d_in), torch.randn(d_out, d_in)
        flops = 2 * n * d_in * d_out
        mkl = flops / best_seconds(lambda: F.linear(x, w), repeats) / 1e9
        onednn = packed = None
        if torch.backends.mkldnn.is_available():
            plain = w.to_mkldnn()
            onednn = (
                flops
                / best_seconds(lambda: torch._C._nn.mkldnn_linear(x.to_mkldnn(), plain, None).to_dense(), repeats)
                / 1e9
            )
        if name.startswith("decode") and float32_available():
            reordered = reorder_float32(w, n)
            packed = flops / best_seconds(lambda: onednn_linear(x, reordered, None), repeats) / 1e9
        own = None
        if name.startswith("decode") and n <= gemv.MAX_ROWS and gemv.kernel() is not None:
            own = flops / best_seconds(lambda: gemv.product(x, w), repeats) / 1e9
        rows_out.append((name, mkl, onednn, packed, own))
    return rows_out


def print_host_rates(repeats: int = 3) -> None:
    print(f"host GEMM rates, float32, {torch.get_num_threads()} thread(s), GFLOP/s (best of {repeats}):")
    print(
        "| shape | MKL (F.linear) | oneDNN (mkldnn_linear) | oneDNN, packed once | aiayn (gemv.c) |\n| --- | --- | --- | --- | --- |"
    )
    for name, mkl, onednn, packed, own in host_rates(repeats):
        cells = ["-" if r is None else f"{r:.0f}" for r in (onednn, packed, own)]
        print(f"| {name} | {mkl:.0f} | {' | '.join(cells)} |")
    print(flush=True)


def print_choices(times: int, rows_list: tuple[int, ...] = (128, 32, 4, 1)) -> None:
    """What `Translator.load` measures (`aiayn.cpu.backend.measure`) for opus-mt-en-de's shapes, `times`
    times at each row count: MKL's estimated step time over oneDNN's, the step on MKL over the step with the
    vocabulary packed, and the backend `choose` takes. Shows how far apart they are on this host against
    `ONEDNN_MARGIN` and `PACKED_MARGIN`, and how much one measurement varies."""
    from aiayn.config import ModelConfig
    from aiayn.cpu import backend

    config = ModelConfig.preset("base", vocab_size=58101)  # 6+6 layers, d_model 512, d_ff 2048: opus-mt's widths
    print(
        f"Translator.load's measure, opus-mt-en-de's shapes, {times} times; oneDNN's layers are taken where MKL / "
        f"oneDNN is above 1, the packed vocabulary where it is faster; where a step's logits exceed "
        f"{backend.SMALL_LOGITS_BYTES >> 20} MiB, oneDNN's layers above {backend.ONEDNN_MARGIN} and the packed "
        f"vocabulary with MKL's layers above {backend.PACKED_MARGIN}:"
    )
    print("| rows | MKL / oneDNN step time, each measurement | MKL / MKL+packed | taken |\n| --- | --- | --- | --- |")
    for rows in rows_list:
        measured = [backend.measure(config, rows) for _ in range(times)]
        ratios = [s["mkl"] / s["onednn"] if "onednn" in s else 0.0 for s in measured]
        packed = [s["mkl"] / s["mkl+packed"] if "mkl+packed" in s else 0.0 for s in measured]
        taken = [backend.pick(s, logits_bytes=4 * rows * config.target_vocab_size) for s in measured]
        counts = ", ".join(f"{name} {taken.count(name)}" for name in sorted(set(taken)))
        print(
            f"| {rows} | {' '.join(f'{r:.2f}' for r in ratios)} | {' '.join(f'{r:.2f}' for r in packed)} | {counts} |"
        )
    print(flush=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--choice",
        type=int,
        default=0,
        metavar="N",
        help="also print N of Translator.load's backend measurements at 128, 32, 4 and 1 rows",
    )
    args = parser.parse_args()
    print_host_rates()
    if args.choice:
        print_choices(args.choice)
