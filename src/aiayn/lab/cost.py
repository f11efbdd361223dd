"""Training cost (§6.1, Table 2): the paper's FLOPs from time x GPUs x sustained rate, and counted from sizes."""

from __future__ import annotations

from typing import NamedTuple

P100_FLOPS = 9.5e12  # the sustained single-precision rate the paper assumes for a P100 (Table 2 footnote)
PAPER_GPUS = 8  # one machine with 8 P100 GPUs (§5.2)
BASE_HOURS = 12.0  # 100,000 steps (§5.2)
BIG_HOURS = 3.5 * 24  # 300,000 steps (§5.2)


class Table2Row(NamedTuple):
    """One row of Table 2: BLEU on newstest2014 and training cost in FLOPs (None where the paper has none)."""

    model: str
    bleu_en_de: float | None
    bleu_en_fr: float | None
    flops_en_de: float | None
    flops_en_fr: float | None


TABLE2: tuple[Table2Row, ...] = (
    Table2Row("ByteNet", 23.75, None, None, None),
    Table2Row("Deep-Att + PosUnk", None, 39.2, None, 1.0e20),
    Table2Row("GNMT + RL", 24.6, 39.92, 2.3e19, 1.4e20),
    Table2Row("ConvS2S", 25.16, 40.46, 9.6e18, 1.5e20),
    Table2Row("MoE", 26.03, 40.56, 2.0e19, 1.2e20),
    Table2Row("Deep-Att + PosUnk Ensemble", None, 40.4, None, 8.0e20),
    Table2Row("GNMT + RL Ensemble", 26.30, 41.16, 1.8e20, 1.1e21),
    Table2Row("ConvS2S Ensemble", 26.36, 41.29, 7.7e19, 1.2e21),
    Table2Row("Transformer (base model)", 27.3, 38.1, 3.3e18, 3.3e18),
    Table2Row("Transformer (big)", 28.4, 41.8, 2.3e19, 2.3e19),
)


def paper_flops(hours: float, gpus: int = PAPER_GPUS, flops_per_gpu: float = P100_FLOPS) -> float:
    """The paper's estimate: training time x number of GPUs x sustained single-precision rate."""
    return hours * 3600 * gpus * flops_per_gpu


PAPER_BATCH_TOKENS = 25_000  # source tokens and target tokens per batch (§5.1)
PAPER_STEPS = {"base": 100_000, "big": 300_000}  # §5.2
PAPER_HOURS = {"base": BASE_HOURS, "big": BIG_HOURS}


def counted_flops(config, steps: int, batch_tokens: int = PAPER_BATCH_TOKENS, length: int = 25) -> float:
    """Training FLOPs counted from the model's matrix products (aiayn.train.flops) for `steps` batches of
    batch_tokens per side, in sentences of `length` word pieces: about 6 x parameters x tokens plus attention."""
    from ..train.flops import train_flops

    sentences = batch_tokens // length
    return steps * train_flops(config, sentences, length, length)


def six_n_d(parameters: int, tokens: float) -> float:
    """The rule of thumb: 2 FLOPs per parameter per token forward, 4 backward."""
    return 6.0 * parameters * tokens


def machine_rate(size: int = 1024, seconds: float = 0.5) -> float:
    """This machine's sustained float32 rate in FLOP/s: square matrix products for about `seconds`."""
    import time

    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    count, began = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - began) < seconds:
        a @ b
        count += 1
    return count * 2 * size**3 / elapsed


def utilisation(counted: float, estimated: float) -> float:
    """The share of the assumed sustained rate that the counted FLOPs would have used."""
    return counted / estimated


def against_earlier_models() -> list[dict]:
    """For each earlier model of Table 2 and language with a cost: its training FLOPs over each Transformer's, and
    its BLEU against theirs (what "orders of magnitude less compute" and "higher BLEU" can be checked against)."""
    base, big = TABLE2[-2], TABLE2[-1]
    rows = []
    for row in TABLE2[:-2]:
        for lang in ("en_de", "en_fr"):
            flops, bleu = getattr(row, f"flops_{lang}"), getattr(row, f"bleu_{lang}")
            if flops is None or bleu is None:
                continue
            rows.append(
                {
                    "model": row.model,
                    "pair": lang.replace("_", "-").upper(),
                    "flops_over_base": flops / getattr(base, f"flops_{lang}"),
                    "flops_over_big": flops / getattr(big, f"flops_{lang}"),
                    "base_bleu_gain": getattr(base, f"bleu_{lang}") - bleu,
                    "big_bleu_gain": getattr(big, f"bleu_{lang}") - bleu,
                }
            )
    return rows
